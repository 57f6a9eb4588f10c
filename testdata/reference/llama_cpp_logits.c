// llama.cpp's logits at every position of a token sequence, decoded as one batch with an f32
// KV cache and without flash attention. usage: llama_cpp_logits MODEL ID,ID,... > out.json
#include "llama.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    llama_token toks[4096]; int n = 0;
    for (char *s = strtok(argv[2], ","); s; s = strtok(NULL, ",")) toks[n++] = atoi(s);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256; cp.n_batch = 256; cp.n_ubatch = 256; cp.n_threads = 1; cp.n_threads_batch = 1;
    cp.type_k = GGML_TYPE_F32; cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 1; }
    int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = toks[i]; b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1;
    }
    b.n_tokens = n;
    if (llama_decode(ctx, b)) { fprintf(stderr, "decode failed\n"); return 1; }
    printf("[");
    for (int i = 0; i < n; i++) {
        float *lg = llama_get_logits_ith(ctx, i);
        printf("%s[", i ? ",\n" : "");
        for (int j = 0; j < nv; j++) printf("%s%.9g", j ? ", " : "", lg[j]);
        printf("]");
    }
    printf("]\n");
    llama_batch_free(b); llama_free(ctx); llama_model_free(model);
    return 0;
}
