// Everything a user of libtrain needs, in one include: the Trainer and its parts, the pieces for a
// hand-written loop (process group, DDP, sampler, checkpoints, preemption, training state), the
// Trainer's flags and the opt-in recipe flags. The built-in models, datasets and recipes are
// train::builtin's (train/builtin.h).
#pragma once

#include "train/adadelta.h"
#include "train/augment.h"
#include "train/callback.h"
#include "train/checkpoint.h"
#include "train/cli.h"
#include "train/config.h"
#include "train/data.h"
#include "train/ddp.h"
#include "train/base/error.h"
#include "train/base/env.h"
#include "train/base/log.h"
#include "train/metrics.h"
#include "train/preemption.h"
#include "train/process_group.h"
#include "train/sampler.h"
#include "train/trainer.h"
#include "train/training_state.h"
#include "train/user_code_error.h"
