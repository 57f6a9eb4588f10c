// llama.cpp's logits on an F32 GGUF: every position of each sequence (one batch), f32 KV
// cache, no flash attention, two threads; the top N logits and the log-sum-exp per position.
// usage: llama_cpp_top_logits MODEL N NAME=ID,ID,... > out.json
#include "llama.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    int topn = atoi(argv[2]);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512; cp.n_batch = 512; cp.n_ubatch = 512; cp.n_threads = 2; cp.n_threads_batch = 2;
    cp.type_k = GGML_TYPE_F32; cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    printf("{");
    for (int a = 3; a < argc; a++) {
        char *eq = strchr(argv[a], '='); *eq = 0;
        llama_token toks[512]; int n = 0;
        for (char *s = strtok(eq + 1, ","); s; s = strtok(NULL, ",")) toks[n++] = atoi(s);
        llama_memory_clear(llama_get_memory(ctx), true);
        struct llama_batch b = llama_batch_init(n, 0, 1);
        for (int i = 0; i < n; i++) { b.token[i] = toks[i]; b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1; }
        b.n_tokens = n;
        if (llama_decode(ctx, b)) return 1;
        printf("%s\"%s\": {\"tokens\": [", a > 3 ? ", " : "", argv[a]);
        for (int i = 0; i < n; i++) printf("%s%d", i ? ", " : "", toks[i]);
        printf("], \"positions\": [");
        for (int i = 0; i < n; i++) {
            float *lg = llama_get_logits_ith(ctx, i);
            int *top = malloc(topn * sizeof(int));
            for (int k = 0; k < topn; k++) top[k] = -1;
            double mx = -1e30;
            for (int j = 0; j < nv; j++) {
                if (lg[j] > mx) mx = lg[j];
                for (int k = 0; k < topn; k++) {
                    if (top[k] < 0 || lg[j] > lg[top[k]]) {
                        for (int m = topn - 1; m > k; m--) top[m] = top[m - 1];
                        top[k] = j; break;
                    }
                }
            }
            double sum = 0; for (int j = 0; j < nv; j++) sum += exp((double)lg[j] - mx);
            printf("%s{\"lse\": %.9g, \"top\": [", i ? ", " : "", mx + log(sum));
            for (int k = 0; k < topn; k++) printf("%s[%d, %.9g]", k ? ", " : "", top[k], lg[top[k]]);
            printf("]}");
            free(top);
        }
        printf("]}");
        llama_batch_free(b);
    }
    printf("}\n");
    return 0;
}
