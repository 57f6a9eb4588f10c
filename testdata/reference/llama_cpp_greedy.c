// llama.cpp's greedy steps on a GGUF file, in the shape of kindle's reference JSON:
// prompt decoded as one batch, then greedy (argmax of raw logits) one token per step.
// usage: llama_cpp_greedy MODEL STEPS NAME=PROMPTFILE... > out.json
#include "llama.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb"); if (!f) { perror(path); exit(1); }
    fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
    char *s = malloc(n + 1); fread(s, 1, n, f); s[n] = 0; fclose(f); return s;
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = *s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') printf("\\n");
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

int main(int argc, char **argv) {
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    int steps = atoi(argv[2]);
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int nv = llama_vocab_n_tokens(vocab);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 4096; cp.n_batch = 4096; cp.n_ubatch = 4096; cp.n_threads = 2; cp.n_threads_batch = 2;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    printf("{\"prompts\": {");
    for (int a = 3; a < argc; a++) {
        char *eq = strchr(argv[a], '='); *eq = 0;
        const char *name = argv[a];
        char *text = slurp(eq + 1);
        size_t len = strlen(text);

        llama_memory_clear(llama_get_memory(ctx), true);
        llama_token toks[8192];
        int n = llama_tokenize(vocab, text, len, toks, 8192, true, true);
        if (n < 0) { fprintf(stderr, "tokenize failed\n"); return 1; }
        printf("%s\"%s\": {\"prompt\": ", a > 3 ? ", " : "", name);
        json_str(text);
        printf(", \"prompt_ids\": [");
        for (int i = 0; i < n; i++) printf("%s%d", i ? ", " : "", toks[i]);
        printf("], ");
        if (llama_decode(ctx, llama_batch_get_one(toks, n))) { fprintf(stderr, "decode failed\n"); return 1; }
        llama_token greedy[4096]; int ng = 0;
        char stepbuf[1 << 20]; size_t sp = 0; stepbuf[0] = 0;
        for (int s = 0; s < steps; s++) {
            float *lg = llama_get_logits_ith(ctx, -1);
            int top[5] = {-1, -1, -1, -1, -1};
            for (int i = 0; i < nv; i++) {
                for (int k = 0; k < 5; k++) {
                    if (top[k] < 0 || lg[i] > lg[top[k]]) {
                        for (int m = 4; m > k; m--) top[m] = top[m - 1];
                        top[k] = i; break;
                    }
                }
            }
            double mx = lg[top[0]], sum = 0;
            for (int i = 0; i < nv; i++) sum += exp((double)lg[i] - mx);
            double lse = mx + log(sum);
            sp += sprintf(stepbuf + sp, "%s{\"argmax\": %d, \"margin\": %.5f, \"top5\": [", s ? ", " : "", top[0], (double)lg[top[0]] - lg[top[1]]);
            for (int k = 0; k < 5; k++) sp += sprintf(stepbuf + sp, "%s[%d, %.5f]", k ? ", " : "", top[k], lg[top[k]] - lse);
            sp += sprintf(stepbuf + sp, "]}");
            llama_token t = top[0];
            greedy[ng++] = t;
            if (llama_vocab_is_eog(vocab, t)) break;
            if (llama_decode(ctx, llama_batch_get_one(&t, 1))) { fprintf(stderr, "decode failed\n"); return 1; }
        }
        printf("\"greedy_ids\": [");
        for (int i = 0; i < ng; i++) printf("%s%d", i ? ", " : "", greedy[i]);
        printf("], \"steps\": [%s]}", stepbuf);
        free(text);
    }
    printf("}}\n");
    llama_free(ctx); llama_model_free(model);
    return 0;
}
