// ggml_rope_ext on fixed vectors: the reference for kindle's scaled rotary tables.
#include "ggml.h"
#include "ggml-cpu.h"
#include <math.h>
#include <stdio.h>

static const int POS[] = {0, 1, 2, 7, 31, 100, 250};
#define NPOS 7

static void run(const char *name, int mode, int d, float theta, float fs, float ext, float attn,
                int orig, int llama3, int first) {
    struct ggml_init_params ip = {64 * 1024 * 1024, NULL, false};
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, d, 1, NPOS);
    struct ggml_tensor *p = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, NPOS);
    struct ggml_tensor *ff = NULL;
    float *xv = x->data;
    for (int t = 0; t < NPOS; t++)
        for (int j = 0; j < d; j++) xv[t * d + j] = cosf(0.37f * j + 0.11f * t) + 0.25f;
    for (int t = 0; t < NPOS; t++) ((int *)p->data)[t] = POS[t];
    if (llama3) {
        ff = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, d / 2);
        float *f = ff->data;
        float context = 8192, low = 1, high = 4, factor = 8;
        for (int i = 0; i < d / 2; i++) {
            float freq = 1.0f / powf(theta, (float)(2 * i) / d);
            float wavelen = (float)(2 * M_PI) / freq;
            if (wavelen < context / high) f[i] = 1;
            else if (wavelen > context / low) f[i] = factor;
            else { float s = (context / wavelen - low) / (high - low); f[i] = 1 / ((1 - s) / factor + s); }
        }
    }
    struct ggml_tensor *y = ggml_rope_ext(ctx, x, p, ff, d, mode, orig, theta, fs, ext, attn, 32.0f, 1.0f);
    struct ggml_cgraph *g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, y);
    ggml_graph_compute_with_ctx(ctx, g, 1);
    printf("%s\"%s\": {\"neox\": %s, \"head_dim\": %d, \"theta\": %.1f, \"freq_scale\": %.9g, \"yarn\": %s, \"attn_factor\": %.9g, \"original_context\": %d, ",
           first ? "" : ",\n", name, mode ? "true" : "false", d, theta, fs, ext != 0 ? "true" : "false", attn, orig);
    printf("\"freq_factors\": ");
    if (ff) { printf("["); for (int i = 0; i < d / 2; i++) printf("%s%.9g", i ? ", " : "", ((float *)ff->data)[i]); printf("]"); }
    else printf("null");
    printf(", \"positions\": [");
    for (int t = 0; t < NPOS; t++) printf("%s%d", t ? ", " : "", POS[t]);
    printf("], \"input\": [");
    for (int i = 0; i < d * NPOS; i++) printf("%s%.9g", i ? ", " : "", xv[i]);
    printf("], \"output\": [");
    float *yv = y->data;
    for (int i = 0; i < d * NPOS; i++) printf("%s%.9g", i ? ", " : "", yv[i]);
    printf("]}");
    ggml_free(ctx);
}

int main(void) {
    printf("{\n");
    run("llama3", 0, 64, 500000.0f, 1.0f, 0.0f, 1.0f, 8192, 1, 1);
    run("linear", 0, 64, 10000.0f, 0.25f, 0.0f, 1.0f, 2048, 0, 0);
    run("yarn", 0, 64, 100000.0f, 0.25f, 1.0f, 1.0f, 1024, 0, 0);
    run("yarn_halves_attn_factor", 2, 128, 1000000.0f, 0.125f, 1.0f, 0.9f, 4096, 0, 0);
    run("yarn_local", 0, 64, 10000.0f, 1.0f, 1.0f, 1.0f, 1024, 0, 0);
    run("plain", 0, 64, 10000.0f, 1.0f, 0.0f, 1.0f, 2048, 0, 0);
    printf("\n}\n");
    return 0;
}
