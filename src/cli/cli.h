/* Subcommands of the trident binary. Each takes (argc, argv) with argv[0] the subcommand
 * name, parses its flags with td_args_parse, and returns the process exit code. */
#ifndef TRIDENT_CLI_H
#define TRIDENT_CLI_H

int cli_data_info(int argc, char **argv);
int cli_train(int argc, char **argv);

int cli_tokenize(int argc, char **argv);
int cli_preprocess(int argc, char **argv);

int cli_checkpoint(int argc, char **argv);
int cli_convert(int argc, char **argv);
int cli_eval(int argc, char **argv);
int cli_generate(int argc, char **argv);

#endif
