// Precompiled header shared by every target (see CMakeLists.txt). Only the
// heavy, stable LibTorch headers belong here; project headers do not.
#pragma once
#include <torch/script.h>
#include <torch/torch.h>
#include <torch/csrc/jit/ir/ir.h>
