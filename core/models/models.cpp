#include "core/models/models.h"

#include "core/error.h"
#include "core/models/zoo.h"

namespace alloy::models {

std::vector<std::string> model_names() {
  return {"lenet", "mlp", "resnet18"};
}

std::unique_ptr<nn::Module> make_model(const std::string& name, Generator& generator, int classes) {
  ALLOY_CHECK(classes > 0, "model ", name, ": classes must be positive, got ", classes);
  std::unique_ptr<nn::Module> model;
  if (name == "lenet") {
    model = make_lenet(generator, classes);
  } else if (name == "mlp") {
    model = make_mlp(generator, classes);
  } else if (name == "resnet18") {
    model = make_resnet18(generator, classes);
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
