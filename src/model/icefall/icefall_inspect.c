/* icefall_inspect.c — `hark inspect` for the icefall_transducer family: the architecture of a
 * converted model (Conformer or zipformer) (model.json as hark reads it), its tensor and parameter
 * counts per part and its file size. Tests: tests/model/icefall/test_icefall_family.c
 * (icefall_cli_inspect) */
#include "model/icefall/icefall.h"

#include "model/family.h"
#include "model/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int icefall_inspect_main(int argc, char **argv);

int icefall_inspect_main(int argc, char **argv)
{
    if (argc != 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *o = argc == 2 ? stdout : stderr;
        fprintf(o, "usage: hark inspect MODEL_DIR\n\n"
                   "Prints a converted icefall transducer's architecture, tensor and parameter "
                   "counts and file size.\nMODEL_DIR is a model-repository entry (with "
                   "1/model.json) or its version directory.\n");
        return argc == 2 ? 0 : 2;
    }
    /* an entry DIR (DIR/1/...) or a version directory DIR/<v> */
    char entry[4096], st_path[4200];
    int version = family_latest_version(argv[1]);
    struct stat sb;
    snprintf(entry, sizeof entry, "%s", argv[1]);
    family_version_path(entry, version, "model.json", st_path, sizeof st_path);
    if (stat(st_path, &sb) != 0) {
        char *slash = strrchr(entry, '/');
        version = atoi(slash ? slash + 1 : entry);
        if (slash)
            *slash = 0;
        else
            snprintf(entry, sizeof entry, ".");
        if (version < 1)
            version = 1;
    }
    hark_err_t err = {0};
    icefall_model_t *m = NULL;
    if (icefall_load(entry, version, &m, &err)) {
        fprintf(stderr, "hark inspect: %s\n", err.msg);
        return 1;
    }
    const icefall_config_t *c = icefall_config(m);
    family_version_path(entry, version, "model.safetensors", st_path, sizeof st_path);
    safetensors_t *st = NULL;
    if (st_open(st_path, &st, &err)) {
        fprintf(stderr, "hark inspect: %s\n", err.msg);
        icefall_destroy(m);
        return 1;
    }
    const char *ver = st_metadata(st, "converter_version");
    const char *src = st_metadata(st, "source");
    printf("model                %s (version %d)\n", entry, version);
    printf("family               icefall_transducer (converter version %s, from %s)\n",
           ver ? ver : "?", src ? src : "?");
    if (c->encoder_type == ICEFALL_ZIPFORMER) {
        const icefall_zipformer_config_t *z = &c->zf;
        if (z->causal)
            printf("recipe               zipformer (Zipformer2, causal: chunks of %d frames, "
                   "%d frames of left context)\n",
                   z->chunk, z->left_frames);
        else
            printf("recipe               zipformer (Zipformer2, non-causal)\n");
        printf("encoder              %d stacks, %d layers, output dim %d, pos_dim %d\n",
               z->n_stacks, c->n_layers, c->d, z->pos_dim);
        for (int i = 0; i < z->n_stacks; i++)
            printf("  stack %-2d           downsampling %d, %d layers, dim %d, %d heads (query %d, "
                   "value %d, pos %d), feedforward %d, kernel %d\n",
                   i, z->ds[i], z->num_layers[i], z->dim[i], z->heads[i], z->qdim[i], z->vdim[i],
                   z->pdim[i], z->ff[i], z->kernel[i]);
        printf("subsampling          Conv2dSubsampling x2 (+ ConvNeXt), output downsampling x2, "
               "%d fbank bins\n",
               c->feature_dim);
    } else {
        printf("recipe               pruned_transducer_stateless3 (Conformer)\n");
        printf("encoder              %d layers, encoder_dim %d, %d heads, dim_feedforward %d, "
               "cnn_module_kernel %d%s\n",
               c->n_layers, c->d, c->nhead, c->ff, c->kernel, c->causal ? " (causal)" : "");
        printf("subsampling          Conv2dSubsampling x%d, %d fbank bins\n", c->subsampling_factor,
               c->feature_dim);
    }
    printf("decoder              stateless, decoder_dim %d, context_size %d, vocab %d, blank %d, "
           "conv groups of %d\n",
           c->decoder_dim, c->context_size, c->vocab, c->blank_id, c->dec_group_size);
    printf("joiner               joiner_dim %d\n", c->joiner_dim);
    printf("features             kaldi fbank, %d Hz, high_freq %s\n", c->sample_rate,
           c->fbank == FBANK_ICEFALL ? "-400 (icefall)" : "0 (sherpa triton)");
    if (c->chunk_size > 0)
        printf("simulate streaming   chunks of %d encoder frames, %d left chunks\n", c->chunk_size,
               c->left_chunks);
    printf("decoding default     %s, beam_size %d; fast_beam_search beam %g, max_contexts %d, "
           "max_states %d\n",
           icefall_method_name((icefall_method_t)c->method), c->beam_size, c->fast_beam.beam,
           c->fast_beam.max_contexts, c->fast_beam.max_states);
    unsigned long long n_enc = 0, n_dec = 0, n_join = 0, n_other = 0;
    size_t n = st_count(st);
    for (size_t i = 0; i < n; i++) {
        const st_tensor_t *t = st_at(st, i);
        unsigned long long k = (unsigned long long)t->count;
        if (!strncmp(t->name, "encoder.", 8) || !strncmp(t->name, "encoder_embed.", 14))
            n_enc += k;
        else if (!strncmp(t->name, "decoder.", 8))
            n_dec += k;
        else if (!strncmp(t->name, "joiner.", 7))
            n_join += k;
        else
            n_other += k;
    }
    printf("tensors              %zu\n", n);
    printf("parameters           %llu (encoder %llu, decoder %llu, joiner %llu%s)\n",
           n_enc + n_dec + n_join + n_other, n_enc, n_dec, n_join, n_other ? ", other" : "");
    if (stat(st_path, &sb) == 0)
        printf("file size            %.1f MiB\n", (double)sb.st_size / 1048576.0);
    st_close(st);
    icefall_destroy(m);
    return 0;
}
