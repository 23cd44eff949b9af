// The builders behind make_model, one file each.
#pragma once

#include <memory>

#include "core/models/models.h"
#include "core/nn/module.h"
#include "core/random.h"

namespace alloy::models {

std::unique_ptr<nn::Module> make_lenet(Generator& generator, int classes);
std::unique_ptr<nn::Module> make_mlp(Generator& generator, int classes);
// depth 18, 34 or 50 (core/models/models.h).
std::unique_ptr<nn::Module> make_resnet(int depth, Generator& generator, int classes,
                                        ImageShape input);
std::unique_ptr<nn::Module> make_ffn(Generator& generator, int classes);

}  // namespace alloy::models
