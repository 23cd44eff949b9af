#include "core/models/models.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "core/models/zoo.h"

namespace alloy::models {

namespace {

const std::vector<std::string> kZooNames = {"lenet",    "mlp",      "resnet18",
                                            "resnet34", "resnet50", "ffn"};

struct Registered {
  std::string name;
  ModelFactory factory;
};

// Registration order is kept, so --model's list of choices is stable.
struct Registry {
  std::mutex mutex;
  std::vector<Registered> models;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

// The factory registered under `name`, or none. A copy, so that it runs outside the lock.
ModelFactory registered_factory(const std::string& name) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  for (const Registered& model : r.models) {
    if (model.name == name) return model.factory;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names = kZooNames;
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  for (const Registered& model : r.models)
    names.push_back(model.name);
  return names;
}

void register_model(const std::string& name, ModelFactory factory) {
  if (name.empty()) usage_fail("register_model: a model needs a name");
  ALLOY_CHECK(factory != nullptr, "register_model: model ", name, " has no factory");
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  const bool taken = std::find(kZooNames.begin(), kZooNames.end(), name) != kZooNames.end() ||
                     std::any_of(r.models.begin(), r.models.end(),
                                 [&name](const Registered& model) { return model.name == name; });
  if (taken) usage_fail("register_model: the name '", name, "' is taken");
  r.models.push_back({name, std::move(factory)});
}

ImageShape image_shape_of(const Tensor& images) {
  ALLOY_CHECK(images.ndim() == 4 && images.dim(2) == images.dim(3), "images ", images.str(),
              " are not a batch of square images [N, C, S, S]");
  return {static_cast<int>(images.dim(1)), static_cast<int>(images.dim(2))};
}

void check_model_input(const std::string& name, ImageShape input) {
  // lenet, mlp and ffn are built for Fashion-MNIST's images.
  if ((name == "lenet" || name == "mlp" || name == "ffn") &&
      (input.channels != 1 || input.size != 28)) {
    fail("model ", name, " takes 1x28x28 images, got ", input.channels, "x", input.size, "x",
         input.size, " (the resnets take any size)");
  }
}

std::unique_ptr<nn::Module> make_model(const std::string& name, Generator& generator, int classes,
                                       ImageShape input) {
  ALLOY_CHECK(classes > 0, "model ", name, ": classes must be positive, got ", classes);
  std::unique_ptr<nn::Module> model;
  check_model_input(name, input);
  if (name == "lenet") {
    model = make_lenet(generator, classes);
  } else if (name == "mlp") {
    model = make_mlp(generator, classes);
  } else if (name == "resnet18" || name == "resnet34" || name == "resnet50") {
    model = make_resnet(std::stoi(name.substr(6)), generator, classes, input);
  } else if (name == "ffn") {
    model = make_ffn(generator, classes);
  } else if (ModelFactory factory = registered_factory(name)) {
    model = factory(generator, classes);
    ALLOY_CHECK(model != nullptr, "model ", name, ": its factory returned no model");
  } else {
    std::string choices;
    for (const auto& known : model_names())
      choices += (choices.empty() ? "" : ", ") + known;
    usage_fail("unknown model '", name, "' (choices: ", choices, ")");
  }
  // The images need no gradient.
  model->set_needs_input_grad(false);
  return model;
}

}  // namespace alloy::models
