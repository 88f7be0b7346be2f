/* wenet_inspect.c — `hark inspect MODEL_DIR` for WeNet models: prints a converted model's
 * architecture (every model.json field), tensor and parameter counts, and the weight file's size.
 * Tests: tests/model/wenet/test_convert_wenet.c (runs it on the converted golden model). */
#include "model/wenet/wenet_tools.h"
#include "model/family.h"
#include "core/error.h"
#include "model/safetensors.h"
#include "model/wenet/wenet_config.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static const char *yes(int b)
{
    return b ? "yes" : "no";
}

/* 15118750 -> "15,118,750" */
static const char *commas(unsigned long long v, char *buf, size_t n)
{
    char tmp[32];
    int len = snprintf(tmp, sizeof tmp, "%llu", v), o = 0;
    for (int i = 0; i < len && (size_t)o + 2 < n; i++) {
        if (i && (len - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = 0;
    return buf;
}

static int is_buffer(const char *name)
{
    size_t n = strlen(name);
    return strstr(name, "global_cmvn.") != NULL ||
           (n > 13 && !strcmp(name + n - 13, ".running_mean")) ||
           (n > 12 && !strcmp(name + n - 12, ".running_var"));
}

static long count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long n = 0;
    int ch, last = '\n';
    while ((ch = fgetc(f)) != EOF) {
        n += ch == '\n';
        last = ch;
    }
    n += last != '\n';
    fclose(f);
    return n;
}

static void print_config(const wenet_config_t *c)
{
    static const char *const acts[] = {"swish", "relu", "gelu"};
    static const char *const decs[] = {"none", "transformer", "bitransformer"};
    printf("frontend\n");
    printf("  features           fbank, %d mel bins, %d Hz, %d ms window, %d ms shift\n",
           c->num_mel_bins, c->sample_rate, c->frame_length_ms, c->frame_shift_ms);
    printf("  global CMVN        %s\n", yes(c->has_cmvn));
    printf("encoder              conformer\n");
    printf("  input_dim          %d\n", c->input_dim);
    printf("  d_model            %d\n", c->d_model);
    printf("  n_heads            %d (d_k %d)\n", c->n_heads, c->d_model / c->n_heads);
    printf("  ffn_dim            %d\n", c->ffn_dim);
    printf("  n_blocks           %d\n", c->n_blocks);
    printf("  input_layer        conv2d%s (x%d, right context %d)\n",
           c->subsample == SUBSAMPLE_CONV2D    ? ""
           : c->subsample == SUBSAMPLE_CONV2D6 ? "6"
                                               : "8",
           (int)c->subsample, wenet_right_context(c));
    printf("  pos_enc            %s\n",
           c->pos == POS_REL ? "rel_pos (rel_selfattn)" : "abs_pos (selfattn)");
    printf("  macaron_style      %s\n", yes(c->macaron));
    printf("  use_cnn_module     %s\n", yes(c->use_cnn_module));
    printf("  cnn_module_kernel  %d\n", c->cnn_kernel);
    printf("  causal             %s\n", yes(c->causal));
    printf("  cnn_module_norm    %s\n",
           c->cnn_norm == CNN_NORM_BATCH ? "batch_norm" : "layer_norm");
    printf("  activation         %s\n", acts[c->activation]);
    printf("  normalize_before   %s\n", yes(c->normalize_before));
    printf("  max_len            %d\n", c->max_len);
    printf("  static_chunk_size  %d\n", c->static_chunk_size);
    printf("  use_dynamic_chunk  %s (streaming %s)\n", yes(c->use_dynamic_chunk),
           c->use_dynamic_chunk || c->static_chunk_size > 0 ? "possible" : "not trained for");
    printf("decoder              %s\n", decs[c->decoder]);
    if (c->decoder != DECODER_NONE) {
        printf("  n_heads            %d\n", c->dec_heads);
        printf("  ffn_dim            %d\n", c->dec_ffn_dim);
        printf("  n_blocks           %d\n", c->dec_blocks);
        if (c->decoder == DECODER_BITRANSFORMER)
            printf("  r_n_blocks         %d\n", c->dec_r_blocks);
        printf("  normalize_before   %s\n", yes(c->dec_normalize_before));
    }
    printf("vocab\n");
    printf("  size               %d\n", c->vocab_size);
    printf("  sos / eos / blank  %d / %d / %d\n", c->sos, c->eos, c->blank);
    printf("decoding\n");
    printf("  ctc_weight         %g\n", c->ctc_weight);
    printf("  reverse_weight     %g\n", c->reverse_weight);
}

int wenet_inspect_main(int argc, char **argv)
{
    if (argc != 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *o = argc == 2 ? stdout : stderr;
        fprintf(o, "usage: hark inspect MODEL_DIR\n\n"
                   "Prints a converted model's architecture, tensor and parameter counts and "
                   "file size.\nMODEL_DIR is a model-repository entry (with 1/model.json) or "
                   "its version directory.\n");
        return argc == 2 ? 0 : 2;
    }
    const char *dir = argv[1];
    char st_path[4096], units[4096];
    struct stat sb;
    family_version_path(dir, 0, "model.safetensors", st_path, sizeof st_path);
    family_version_path(dir, 0, "units.txt", units, sizeof units);
    if (stat(st_path, &sb) != 0) {
        snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
        snprintf(units, sizeof units, "%s/units.txt", dir);
    }

    hark_err_t err = {0};
    wenet_config_t cfg;
    if (wenet_config_load(dir, &cfg, &err)) {
        fprintf(stderr, "hark inspect: %s\n", err.msg);
        return 1;
    }
    safetensors_t *st = NULL;
    if (st_open(st_path, &st, &err)) {
        fprintf(stderr, "hark inspect: %s\n", err.msg);
        return 1;
    }
    const char *fam = st_metadata(st, "family");
    const char *ver = st_metadata(st, "converter_version");
    printf("model                %s\n", dir);
    printf("family               %s (converter version %s)\n", fam ? fam : "?", ver ? ver : "?");
    print_config(&cfg);

    unsigned long long enc = 0, dec = 0, ctc = 0, other = 0, buffers = 0, bytes = 0;
    size_t n = st_count(st), n_f32 = 0;
    for (size_t i = 0; i < n; i++) {
        const st_tensor_t *t = st_at(st, i);
        bytes += t->nbytes;
        n_f32 += t->dtype == ST_F32;
        if (is_buffer(t->name))
            buffers += t->count;
        else if (!strncmp(t->name, "encoder.", 8))
            enc += t->count;
        else if (!strncmp(t->name, "decoder.", 8))
            dec += t->count;
        else if (!strncmp(t->name, "ctc.", 4))
            ctc += t->count;
        else
            other += t->count;
    }
    char b1[32], b2[32], b3[32], b4[32];
    printf("tensors              %zu (%zu float32), %s bytes of data\n", n, n_f32,
           commas(bytes, b1, sizeof b1));
    printf("parameters           encoder %s, decoder %s, ctc %s\n", commas(enc, b1, sizeof b1),
           commas(dec, b2, sizeof b2), commas(ctc, b3, sizeof b3));
    if (other)
        printf("  other              %s\n", commas(other, b1, sizeof b1));
    printf("  total              %s\n", commas(enc + dec + ctc + other, b4, sizeof b4));
    printf("buffers              %s (CMVN mean/istd, batch-norm running stats)\n",
           commas(buffers, b1, sizeof b1));
    long lines = count_lines(units);
    printf("units.txt            %ld units%s\n", lines,
           lines == cfg.vocab_size ? "" : "  ** does not match vocab size **");
    if (stat(st_path, &sb) == 0)
        printf("file                 %s: %s bytes (%.1f MiB)\n", st_path,
               commas((unsigned long long)sb.st_size, b1, sizeof b1),
               (double)sb.st_size / (1024.0 * 1024.0));
    st_close(st);
    return lines == cfg.vocab_size ? 0 : 1;
}
