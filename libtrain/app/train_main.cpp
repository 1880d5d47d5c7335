// The `train` program: the Trainer's flags and the built-in recipes' (train/builtin.h) around
// builtin::run_training, which trains a registered model on a built-in dataset with its recipe.
#include "train/builtin.h"

int main(int argc, char** argv) { return train::builtin::main(argc, argv); }
