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

#endif
