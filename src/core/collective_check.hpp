#pragma once
// The collective check lives in src/common (below the executors, which use it too); plans keep
// including it under this name.
#include "common/collective_check.hpp"
