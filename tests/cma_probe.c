/* Configure-time probe (tests/CMakeLists.txt): can one process read another's memory with Linux
 * CMA (process_vm_readv), as Open MPI's shared-memory transport does to move a large message in
 * one copy? A child reads its parent (not its descendant, as one rank reads another): exit 0 if it
 * reads the bytes, 1 if the kernel (Yama ptrace_scope) or a container's seccomp refuses. */
#define _GNU_SOURCE
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static char secret[8] = "cma ok";

int main(void)
{
    pid_t parent = getpid(), child = fork();
    if (child < 0) return 1;
    if (child == 0) {
        char got[8] = "";
        struct iovec local = {got, sizeof got}, remote = {secret, sizeof secret};
        ssize_t n = process_vm_readv(parent, &local, 1, &remote, 1, 0);
        _exit(n == (ssize_t)sizeof secret && got[0] == 'c' && got[4] == 'o' ? 0 : 1);
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child) return 1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
