// Deprecated: moved to train/device.h (train::base, libtrain/base/) so that train::train needs no
// launcher. This forwarding header stays for one release (0.2.0 removes it): include "train/device.h".
#pragma once

#include "train/device.h"
