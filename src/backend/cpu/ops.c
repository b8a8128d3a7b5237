/* The vtable's kernel entries of one ISA build (see cpu.h): compiled once per build, so each
 * build fills the table with its own kernels. Each entry takes the contract's typed buffers,
 * checks their dtypes (the cpu computes activations in fp32; the low-precision GEMMs read bf16
 * or fp16) and calls the kernel on plain pointers. */
#include "trident/check.h"
#include "cpu.h"

#define CPU_DTYPE_HINT "the cpu backend computes activations in fp32: pass fp32 buffers (be_f32, be_f32_out)"

/* The fp32 elements of an activation buffer; dies naming the entry when they are not fp32. */
static float *out32(be_out x, const char *entry)
{
    TD_CHECK(x.dt == BE_F32 || !x.p, CPU_DTYPE_HINT, "cpu %s: a %s output buffer", entry, be_dtype_name(x.dt));
    return x.p;
}
static const float *in32(be_in x, const char *entry)
{
    TD_CHECK(x.dt == BE_F32 || !x.p, CPU_DTYPE_HINT, "cpu %s: a %s input buffer", entry, be_dtype_name(x.dt));
    return x.p;
}
/* A low-precision GEMM's input: in the GEMM's dtype dt. */
static const void *in_lp(be_in x, be_dtype dt, const char *entry)
{
    TD_CHECK(x.dt == dt || !x.p, "round a low-precision GEMM's inputs into its dtype first (be_convert)",
             "cpu %s: a %s input to a %s GEMM", entry, be_dtype_name(x.dt), be_dtype_name(dt));
    return x.p;
}

static void e_matmul_fwd(const backend *be, be_out out, be_in inp, const float *w, const float *b, int BT, int C,
                         int OC)
{
    cpu_matmul_fwd(be, out32(out, "matmul_fwd"), in32(inp, "matmul_fwd"), w, b, BT, C, OC);
}
static void e_matmul_bwd(const backend *be, be_out dinp, float *dw, float *db, be_in dout, be_in inp, const float *w,
                         int BT, int C, int OC)
{
    cpu_matmul_bwd(be, out32(dinp, "matmul_bwd"), dw, db, in32(dout, "matmul_bwd"), in32(inp, "matmul_bwd"), w, BT, C,
                   OC);
}
static void e_matmul_fwd_lp(const backend *be, be_out out, be_in inp, const void *w, const float *b, be_dtype dt,
                            int BT, int C, int OC)
{
    cpu_matmul_fwd_lp(be, out32(out, "matmul_fwd_lp"), in_lp(inp, dt, "matmul_fwd_lp"), w, b, dt, BT, C, OC);
}
static void e_matmul_bwd_lp(const backend *be, be_out dinp, float *dw, be_in dout, be_in inp, const void *w,
                            be_dtype dt, int BT, int C, int OC)
{
    cpu_matmul_bwd_lp(be, out32(dinp, "matmul_bwd_lp"), dw, in_lp(dout, dt, "matmul_bwd_lp"),
                      in_lp(inp, dt, "matmul_bwd_lp"), w, dt, BT, C, OC);
}

static void e_embedding_fwd(const backend *be, be_out out, const int32_t *ids, const float *wte, int BT, int C,
                            int vstart, int Vloc)
{
    cpu_embedding_fwd(be, out32(out, "embedding_fwd"), ids, wte, BT, C, vstart, Vloc);
}
static void e_embedding_bwd(const backend *be, float *dwte, be_in dout, const int32_t *ids, int BT, int C, int vstart,
                            int Vloc)
{
    cpu_embedding_bwd(be, dwte, in32(dout, "embedding_bwd"), ids, BT, C, vstart, Vloc);
}
static void e_pos_embedding_fwd(const backend *be, be_out out, const float *wpe, int B, int T, int C, int pos0)
{
    cpu_pos_embedding_fwd(be, out32(out, "pos_embedding_fwd"), wpe, B, T, C, pos0);
}
static void e_pos_embedding_bwd(const backend *be, float *dwpe, be_in dout, int B, int T, int C, int pos0)
{
    cpu_pos_embedding_bwd(be, dwpe, in32(dout, "pos_embedding_bwd"), B, T, C, pos0);
}

static void e_layernorm_fwd(const backend *be, be_out out, float *mean, float *rstd, be_in inp, const float *w,
                            const float *b, int N, int C, float eps)
{
    cpu_layernorm_fwd(be, out32(out, "layernorm_fwd"), mean, rstd, in32(inp, "layernorm_fwd"), w, b, N, C, eps);
}
static void e_layernorm_bwd(const backend *be, be_out dinp, float *dw, float *db, be_in dout, be_in inp,
                            const float *w, const float *mean, const float *rstd, int N, int C)
{
    cpu_layernorm_bwd(be, out32(dinp, "layernorm_bwd"), dw, db, in32(dout, "layernorm_bwd"),
                      in32(inp, "layernorm_bwd"), w, mean, rstd, N, C);
}
static void e_rmsnorm_fwd(const backend *be, be_out out, float *rstd, be_in inp, const float *w, int N, int C,
                          float eps)
{
    cpu_rmsnorm_fwd(be, out32(out, "rmsnorm_fwd"), rstd, in32(inp, "rmsnorm_fwd"), w, N, C, eps);
}
static void e_rmsnorm_bwd(const backend *be, be_out dinp, float *dw, be_in dout, be_in inp, const float *w,
                          const float *rstd, int N, int C)
{
    cpu_rmsnorm_bwd(be, out32(dinp, "rmsnorm_bwd"), dw, in32(dout, "rmsnorm_bwd"), in32(inp, "rmsnorm_bwd"), w, rstd,
                    N, C);
}

static void e_rope_fwd(const backend *be, be_out x, int B, int T, int ld, int nh, int hs, int rot, const be_rope *r,
                       int pos0, const int32_t *pos)
{
    cpu_rope_fwd(be, out32(x, "rope_fwd"), B, T, ld, nh, hs, rot, r, pos0, pos);
}
static void e_rope_bwd(const backend *be, be_out dx, int B, int T, int ld, int nh, int hs, int rot, const be_rope *r,
                       int pos0, const int32_t *pos)
{
    cpu_rope_bwd(be, out32(dx, "rope_bwd"), B, T, ld, nh, hs, rot, r, pos0, pos);
}

static void e_attention_fwd(const backend *be, be_out out, float *lse, be_in q, be_in k, be_in v, int ldq, int ldkv,
                            int B, int T, int NH, int NKV, int HS, const int32_t *klen, const int32_t *seg,
                            const be_drop *drop)
{
    const char *e = "attention_fwd";
    cpu_attention_fwd(be, out32(out, e), lse, in32(q, e), in32(k, e), in32(v, e), ldq, ldkv, B, T, NH, NKV, HS, klen,
                      seg, drop);
}
/* out unused: the cpu's backward has each row's probabilities, and D from them. */
static void e_attention_bwd(const backend *be, be_out dq, be_out dk, be_out dv, be_in dout, be_in out, be_in q,
                            be_in k, be_in v, const float *lse, int ldq, int ldkv, int B, int T, int NH, int NKV,
                            int HS, const int32_t *klen, const int32_t *seg, const be_drop *drop)
{
    const char *e = "attention_bwd";
    (void)out;
    cpu_attention_bwd(be, out32(dq, e), out32(dk, e), out32(dv, e), in32(dout, e), in32(q, e), in32(k, e),
                      in32(v, e), lse, ldq, ldkv, B, T, NH, NKV, HS, klen, seg, drop);
}
static void e_attention_block_fwd(const backend *be, be_out out, float *lse, be_in q, be_in k, be_in v, int ldq,
                                  int ldkv, int B, int Tq, int Tk, int Tg, const int32_t *qpos, const int32_t *kpos,
                                  int NH, int NKV, int HS, const int32_t *klen, const int32_t *seg, const be_drop *drop)
{
    const char *e = "attention_block_fwd";
    cpu_attention_block_fwd(be, out32(out, e), lse, in32(q, e), in32(k, e), in32(v, e), ldq, ldkv, B, Tq, Tk, Tg, qpos,
                            kpos, NH, NKV, HS, klen, seg, drop);
}
static void e_attention_block_bwd(const backend *be, be_out dq, be_out dk, be_out dv, be_in dout, be_in q, be_in k,
                                  be_in v, const float *lse, const float *D, int ldq, int ldkv, int B, int Tq, int Tk,
                                  int Tg, const int32_t *qpos, const int32_t *kpos, int NH, int NKV, int HS,
                                  const int32_t *klen, const int32_t *seg, const be_drop *drop)
{
    const char *e = "attention_block_bwd";
    cpu_attention_block_bwd(be, out32(dq, e), out32(dk, e), out32(dv, e), in32(dout, e), in32(q, e), in32(k, e),
                            in32(v, e), lse, D, ldq, ldkv, B, Tq, Tk, Tg, qpos, kpos, NH, NKV, HS, klen, seg, drop);
}
static void e_attention_merge(const backend *be, be_out out, float *lse, be_in out_part, const float *lse_part, int B,
                              int T, int NH, int HS)
{
    const char *e = "attention_merge";
    cpu_attention_merge(be, out32(out, e), lse, in32(out_part, e), lse_part, B, T, NH, HS);
}
static void e_attention_delta(const backend *be, float *D, be_in dout, be_in out, int B, int T, int NH, int HS)
{
    const char *e = "attention_delta";
    cpu_attention_delta(be, D, in32(dout, e), in32(out, e), B, T, NH, HS);
}
static void e_attention_kv_fwd(const backend *be, be_out out, be_in q, be_in kc, be_in vc, int ldq, int B, int n,
                               int pos0, int cap, int NH, int NKV, int HS)
{
    const char *e = "attention_kv_fwd";
    cpu_attention_kv_fwd(be, out32(out, e), in32(q, e), in32(kc, e), in32(vc, e), ldq, B, n, pos0, cap, NH, NKV, HS);
}

static void e_act_fwd(const backend *be, int act, int glu, be_out out, be_in inp, int N, int F)
{
    cpu_act_fwd(be, act, glu, out32(out, "act_fwd"), in32(inp, "act_fwd"), N, F);
}
static void e_act_bwd(const backend *be, int act, int glu, be_out dinp, be_in dout, be_in inp, int N, int F)
{
    cpu_act_bwd(be, act, glu, out32(dinp, "act_bwd"), in32(dout, "act_bwd"), in32(inp, "act_bwd"), N, F);
}
static void e_bias_gelu_fwd(const backend *be, be_out out, be_in inp, const float *b, int N, int C)
{
    cpu_bias_gelu_fwd(be, out32(out, "bias_gelu_fwd"), in32(inp, "bias_gelu_fwd"), b, N, C);
}
static void e_bias_gelu_bwd(const backend *be, be_out dinp, float *db, be_in dout, be_in inp, const float *b, int N,
                            int C)
{
    cpu_bias_gelu_bwd(be, out32(dinp, "bias_gelu_bwd"), db, in32(dout, "bias_gelu_bwd"), in32(inp, "bias_gelu_bwd"),
                      b, N, C);
}
static void e_add(const backend *be, be_out out, be_in a, be_in b, size_t n)
{
    cpu_add(be, out32(out, "add"), in32(a, "add"), in32(b, "add"), n);
}
static void e_scale(const backend *be, be_out x, float s, size_t n) { cpu_scale(be, out32(x, "scale"), s, n); }
static void e_bias_add(const backend *be, be_out out, const float *b, int N, int C)
{
    cpu_bias_add(be, out32(out, "bias_add"), b, N, C);
}
static void e_bias_bwd(const backend *be, float *db, be_in dout, int N, int C)
{
    cpu_bias_bwd(be, db, in32(dout, "bias_bwd"), N, C);
}

static void e_dropout_fwd(const backend *be, be_out out, be_in inp, int B, int T, int C, const be_drop *drop)
{
    cpu_dropout_fwd(be, out32(out, "dropout_fwd"), in32(inp, "dropout_fwd"), B, T, C, drop);
}
static void e_dropout_bwd(const backend *be, be_out dinp, be_in dout, int B, int T, int C, const be_drop *drop)
{
    cpu_dropout_bwd(be, out32(dinp, "dropout_bwd"), in32(dout, "dropout_bwd"), B, T, C, drop);
}
static void e_bias_dropout_add_fwd(const backend *be, be_out out, be_in resid, be_in inp, const float *b, int B,
                                   int T, int C, const be_drop *drop)
{
    const char *e = "bias_dropout_add_fwd";
    cpu_bias_dropout_add_fwd(be, out32(out, e), in32(resid, e), in32(inp, e), b, B, T, C, drop);
}

static void e_ce_max(const backend *be, float *maxv, be_in logits, int BT, int Vloc, int Vreal)
{
    cpu_ce_max(be, maxv, in32(logits, "ce_max"), BT, Vloc, Vreal);
}
static void e_ce_sumexp(const backend *be, float *sumexp, be_in logits, const float *maxv, int BT, int Vloc,
                        int Vreal)
{
    cpu_ce_sumexp(be, sumexp, in32(logits, "ce_sumexp"), maxv, BT, Vloc, Vreal);
}
static void e_ce_target(const backend *be, float *tlogit, be_in logits, const int32_t *targets, int BT, int Vloc,
                        int vstart)
{
    cpu_ce_target(be, tlogit, in32(logits, "ce_target"), targets, BT, Vloc, vstart);
}
static void e_ce_bwd(const backend *be, be_out logits, const float *maxv, const float *sumexp, const int32_t *targets,
                     const float *dloss, int BT, int Vloc, int Vreal, int vstart)
{
    cpu_ce_bwd(be, out32(logits, "ce_bwd"), maxv, sumexp, targets, dloss, BT, Vloc, Vreal, vstart);
}

static void e_ce_bwd_to(const backend *be, be_out dlogits, be_in logits, const float *maxv, const float *sumexp,
                        const int32_t *targets, const float *dloss, int BT, int Vloc, int Vreal, int vstart)
{
    TD_CHECK(dlogits.dt == BE_F32 || dlogits.dt == BE_BF16 || dlogits.dt == BE_F16, "write fp32, bf16 or fp16",
             "cpu ce_bwd_to: dlogits of dtype %d", (int)dlogits.dt);
    cpu_ce_bwd_to(be, dlogits.p, dlogits.dt, in32(logits, "ce_bwd_to"), maxv, sumexp, targets, dloss, BT, Vloc, Vreal,
                  vstart);
}

void cpu_kernels_fill(struct be_ops *o)
{
    o->matmul_fwd = e_matmul_fwd;
    o->matmul_bwd = e_matmul_bwd;
    o->matmul_grouped_fwd = cpu_matmul_grouped_fwd;
    o->matmul_grouped_bwd = cpu_matmul_grouped_bwd;
    o->convert = cpu_convert;
    o->matmul_fwd_lp = e_matmul_fwd_lp;
    o->matmul_bwd_lp = e_matmul_bwd_lp;
    o->lp_native = cpu_lp_native;
    o->embedding_fwd = e_embedding_fwd;
    o->embedding_bwd = e_embedding_bwd;
    o->pos_embedding_fwd = e_pos_embedding_fwd;
    o->pos_embedding_bwd = e_pos_embedding_bwd;
    o->layernorm_fwd = e_layernorm_fwd;
    o->layernorm_bwd = e_layernorm_bwd;
    o->rmsnorm_fwd = e_rmsnorm_fwd;
    o->rmsnorm_bwd = e_rmsnorm_bwd;
    o->rope_fwd = e_rope_fwd;
    o->rope_bwd = e_rope_bwd;
    o->attention_fwd = e_attention_fwd;
    o->attention_bwd = e_attention_bwd;
    o->attention_block_fwd = e_attention_block_fwd;
    o->attention_block_bwd = e_attention_block_bwd;
    o->attention_merge = e_attention_merge;
    o->attention_delta = e_attention_delta;
    o->attention_kv_fwd = e_attention_kv_fwd;
    o->act_fwd = e_act_fwd;
    o->act_bwd = e_act_bwd;
    o->bias_gelu_fwd = e_bias_gelu_fwd;
    o->bias_gelu_bwd = e_bias_gelu_bwd;
    o->moe_route_fwd = cpu_moe_route_fwd;
    o->moe_route_bwd = cpu_moe_route_bwd;
    o->moe_aux_loss = cpu_moe_aux_loss;
    o->moe_z_loss = cpu_moe_z_loss;
    o->moe_permute = cpu_moe_permute;
    o->moe_permute_bwd = cpu_moe_permute_bwd;
    o->moe_unpermute = cpu_moe_unpermute;
    o->moe_unpermute_bwd = cpu_moe_unpermute_bwd;
    o->add = e_add;
    o->scale = e_scale;
    o->bias_add = e_bias_add;
    o->bias_bwd = e_bias_bwd;
    o->dropout_fwd = e_dropout_fwd;
    o->dropout_bwd = e_dropout_bwd;
    o->bias_dropout_add_fwd = e_bias_dropout_add_fwd;
    o->ce_max = e_ce_max;
    o->ce_sumexp = e_ce_sumexp;
    o->ce_target = e_ce_target;
    o->ce_loss = cpu_ce_loss;
    o->ce_bwd = e_ce_bwd;
    o->ce_bwd_to = e_ce_bwd_to;
    o->adamw = cpu_adamw;
    o->sumsq = cpu_sumsq;
}
