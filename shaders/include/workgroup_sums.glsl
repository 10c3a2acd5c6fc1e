// Fixed-order sums over a workgroup, shared by the two reduction stages of batch_normalization_grad
// and batch_normalization_training_grad (batch_normalization_grad_partials, _finalize). The
// kernel enables GL_KHR_shader_subgroup_basic and _arithmetic and declares:
//   LK      channel slots per workgroup (a specialization constant),
//   LR      lanes per channel slot: const uint LR = WG / LK,
//   K_FAST  lane layout: true, invocation t is lane t / LK of slot t % LK (consecutive
//           invocations on consecutive channels); false, lane t % LR of slot t / LR.
// column_sums(v, kl, rl) adds v over the LR lanes of every slot kl < LK into res[kl], in a
// fixed order for any subgroup size: subgroupAdd, then a fixed loop over subgroups in shared
// memory. Called by every invocation (it holds barriers); res[kl] is ready when it returns.

shared vec4 sh[WG];
shared vec4 res[WG];

void column_sums(vec4 v, uint kl, uint rl) {
    if (LR == 1u) {
        if (kl < LK && rl < LR) res[kl] = v;  // one lane per channel: nothing to add
    } else if (LK == 1u) {
        v = subgroupAdd(v);
        if (gl_SubgroupInvocationID == 0u) sh[gl_SubgroupID] = v;
        barrier();
        if (gl_SubgroupID == 0u) {
            vec4 acc = vec4(0.0);
            for (uint i = gl_SubgroupInvocationID; i < gl_NumSubgroups; i += gl_SubgroupSize) {
                acc += sh[i];
            }
            acc = subgroupAdd(acc);
            if (gl_SubgroupInvocationID == 0u) res[0] = acc;
        }
    } else {
        if (kl < LK && rl < LR) sh[K_FAST ? rl * LK + kl : kl * LR + rl] = v;
        barrier();
        // Subgroup s adds up the columns s, s + NumSubgroups, ...
        for (uint col = gl_SubgroupID; col < LK; col += gl_NumSubgroups) {
            vec4 acc = vec4(0.0);
            for (uint i = gl_SubgroupInvocationID; i < LR; i += gl_SubgroupSize) {
                acc += sh[K_FAST ? i * LK + col : col * LR + i];
            }
            acc = subgroupAdd(acc);
            if (gl_SubgroupInvocationID == 0u) res[col] = acc;
        }
    }
    barrier();
}
