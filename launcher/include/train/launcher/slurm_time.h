// Deprecated: moved to train/slurm_time.h (train::base, libtrain/base/) so that train::train needs no
// launcher. This forwarding header stays for one release (0.2.0 removes it): include "train/slurm_time.h".
#pragma once

#include "train/slurm_time.h"
