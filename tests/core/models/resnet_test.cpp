// The zoo's ResNets: torchvision's parameter counts at 224x224 and 1000 classes, the stem each
// image size gets, and a forward to [N, classes] logits at a small ImageNet-stem size.
#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "core/models/models.h"
#include "core/ops/elementwise.h"

using namespace alloy;

namespace {

std::int64_t parameter_count(nn::Module& model) {
  std::int64_t count = 0;
  for (const nn::Parameter* parameter : model.parameters())
    count += parameter->value.numel();
  return count;
}

std::int64_t count_of(const std::string& name, int classes, models::ImageShape input) {
  Generator generator(1);
  return parameter_count(*models::make_model(name, generator, classes, input));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(resnet)

BOOST_AUTO_TEST_CASE(imagenet_resnets_have_torchvisions_parameter_counts) {
  BOOST_TEST(count_of("resnet18", 1000, {3, 224}) == 11689512);
  BOOST_TEST(count_of("resnet34", 1000, {3, 224}) == 21797672);
  BOOST_TEST(count_of("resnet50", 1000, {3, 224}) == 25557032);
}

BOOST_AUTO_TEST_CASE(the_stem_follows_the_image_size) {
  // The 3x3 stem has 3 * 3 * C * 64 weights where the 7x7 one has 7 * 7 * C * 64; the rest is
  // the same. Below kImageNetStemMinSize the small stem, from it on the ImageNet one.
  const std::int64_t small = count_of("resnet18", 10, {3, models::kImageNetStemMinSize - 1});
  const std::int64_t large = count_of("resnet18", 10, {3, models::kImageNetStemMinSize});
  BOOST_TEST(large - small == (49 - 9) * 3 * 64);
  // Today's 28x28x1 resnet18: 3x3 stem over one channel.
  BOOST_TEST(count_of("resnet18", 10, {1, 28}) == small - 9 * 2 * 64);
  Generator generator(1);
  const auto model = models::make_model("resnet18", generator, 10, {3, 96});
  BOOST_TEST(model->describe().find("MaxPool2d") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(resnet50_maps_64x64_images_to_logits) {
  Generator generator(3);
  const auto model = models::make_model("resnet50", generator, 7, {3, 64});
  model->set_training(false);
  std::vector<float> pixels(2 * 3 * 64 * 64);
  for (std::size_t i = 0; i < pixels.size(); ++i)
    pixels[i] = static_cast<float>((i * 31) % 256);
  const Tensor images = Tensor::from_floats({2, 3, 64, 64}, pixels, DType::u8);
  const Tensor logits = model->forward(normalize_images(images, DType::f32));
  BOOST_TEST((logits.shape() == Shape{2, 7}));
  for (const float value : logits.to_floats())
    BOOST_TEST(std::isfinite(value));
}

BOOST_AUTO_TEST_CASE(mnist_models_refuse_other_images) {
  Generator generator(1);
  BOOST_CHECK_THROW(models::make_model("lenet", generator, 10, {3, 28}), Error);
  BOOST_CHECK_THROW(models::make_model("mlp", generator, 10, {1, 32}), Error);
}

BOOST_AUTO_TEST_SUITE_END()
