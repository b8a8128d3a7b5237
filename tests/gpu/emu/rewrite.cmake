# One file of src/backend/cuda as host C++ for the emulation (cmake -DIN=... -DOUT=... -P rewrite.cmake;
# tests/gpu/cuda_emu.cmake runs it at build time): the two constructs C++ cannot parse become calls
# of tests/gpu/emu/cuda_runtime.h,
#   kernel<<<grid, block, smem, stream>>>(args)   ->  emu_launch(kernel, grid, block, smem, stream)(args)
#   extern __shared__ T name[];                    ->  T *name = (T *)emu_smem();
# (kernel: a name, with template arguments or not); a #line keeps the compiler's messages and
# __FILE__ on the original file. Nothing else changes.
file(READ "${IN}" text)
string(REGEX REPLACE "([A-Za-z_][A-Za-z_0-9]*(<[^<>;(){}]*>)?)[ \t]*<<<" "emu_launch(\\1, " text "${text}")
string(REPLACE ">>>(" ")(" text "${text}")
string(REGEX REPLACE "extern[ \t]+__shared__[ \t]+([^;\\[]*[^ \t;\\[])[ \t]+([A-Za-z_][A-Za-z_0-9]*)\\[\\];"
       "\\1 *\\2 = (\\1 *)emu_smem();" text "${text}")
if(text MATCHES "<<<|>>>")
  message(FATAL_ERROR "${IN}: a kernel launch rewrite.cmake does not recognise (kernel<<<...>>>(args) on one name)")
endif()
file(WRITE "${OUT}.tmp" "#line 1 \"${IN}\"\n${text}")
file(RENAME "${OUT}.tmp" "${OUT}")
