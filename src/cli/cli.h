/* cli.h — subcommands of the hark binary; each returns the process exit status. */
#ifndef HARK_CLI_H
#define HARK_CLI_H

int cli_features(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_transcribe(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_inspect(int argc, char **argv);
int cli_perf(int argc, char **argv);
int cli_speak(int argc, char **argv);
int cli_vocode(int argc, char **argv);
int cli_vad(int argc, char **argv);

/* `-` on a command line: standard input spooled to a temporary file (removed at exit); its
 * path, or NULL after a message. cli_file_name gives "-" for that path, the path otherwise. */
const char *cli_spool_stdin(void);
const char *cli_file_name(const char *path);

/* The bundled demo models (models/, issue #22): the repository's path into out (n bytes), 0;
 * -1 when it cannot be found ($HARK_DEMO_MODELS, beside the built binary, or installed). */
#define CLI_DEMO_ASR "demo-en-asr"
#define CLI_DEMO_TTS "demo-en-tts"
#include <stddef.h>
int cli_demo_models(char *out, size_t n);
/* The bundled entry (CLI_DEMO_ASR, CLI_DEMO_TTS) into out when it is there, 0, and a note on
 * stderr "hark CMD: no --model given: using the bundled WHAT DIR (...)"; -1 otherwise. */
int cli_demo_entry(const char *entry, const char *cmd, const char *what, char *out, size_t n);

#include "hark.h"
#include "model/silero/silero_vad.h"

/* `hark transcribe --vad DIR` (cmd_transcribe_vad.c): files of any length read in blocks,
 * segmented by the Silero VAD model DIR with so, recognised by model in batches of `batch`
 * segments; format text, json, srt or vtt. Returns the exit status. */
int transcribe_vad_files(hark_model_t *model, const hark_asr_opts_t *opts, const char *vad_dir,
                         const silero_seg_opts_t *so, int batch, const char *format,
                         const char **files, int nfiles);
/* The same for `--wavscp` with `--vad`: each item's path (a file, or a Kaldi "command |"
 * whose output is spooled to a temporary file) recognised as above, its text and duration into
 * the item (status HARK_ERR_IO when it could not be read or recognised: the reason is on stderr),
 * then done(user, item, done, total). Returns 0 when every item succeeded, 1 otherwise. */
#include "eval/decode_list.h"
int transcribe_vad_items(hark_model_t *model, const hark_asr_opts_t *opts, const char *vad_dir,
                         const silero_seg_opts_t *so, int batch, decode_item_t *items, int n,
                         decode_done_fn done, void *user);

#endif
