// Deprecated: moved to train/hostlist.h (train::base, libtrain/base/) so that train::train needs no
// launcher. This forwarding header stays for one release (0.2.0 removes it): include "train/hostlist.h".
#pragma once

#include "train/hostlist.h"
