// models::register_model: a program's own model joins the zoo by name, so make_model (and with it
// the Trainer, checkpoints and the command's --model) builds it; names are unique.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/models/models.h"
#include "core/nn/flatten.h"
#include "core/nn/linear.h"
#include "core/nn/sequential.h"

using namespace alloy;

namespace {

std::unique_ptr<nn::Module> make_probe(Generator& /*generator*/, int classes) {
  auto net = std::make_unique<nn::Sequential>();
  net->emplace<nn::Flatten>();
  net->emplace<nn::Linear>(28 * 28, classes);
  return net;
}

bool listed(const std::string& name) {
  const auto names = models::model_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_registered_model_is_built_by_name) {
  BOOST_TEST(!listed("registry_probe"));
  BOOST_CHECK_THROW(
      {
        Generator generator(1);
        models::make_model("registry_probe", generator);
      },
      UsageError);
  models::register_model("registry_probe", make_probe);
  BOOST_TEST(listed("registry_probe"));
  BOOST_TEST(models::model_names().front() == "lenet");  // the zoo first, then the registered
  Generator generator(1);
  const auto model = models::make_model("registry_probe", generator, 7);
  const auto parameters = model->parameters();
  BOOST_TEST_REQUIRE(parameters.size() == 2u);
  BOOST_TEST(parameters[0]->value.dim(0) == 7);
}

BOOST_AUTO_TEST_CASE(names_are_unique_and_factories_present) {
  BOOST_CHECK_THROW(models::register_model("lenet", make_probe), UsageError);
  models::register_model("registry_twice", make_probe);
  BOOST_CHECK_THROW(models::register_model("registry_twice", make_probe), UsageError);
  BOOST_CHECK_THROW(models::register_model("", make_probe), UsageError);
  BOOST_CHECK_THROW(models::register_model("registry_empty", nullptr), Error);
  BOOST_TEST(!listed("registry_empty"));
}
