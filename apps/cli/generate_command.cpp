// alloy generate --checkpoint FILE --prompt TEXT --tokens N: rebuilds a sequence model from its
// checkpoint (fp32 weights) and continues the prompt token by token, each drawn from the
// softmax of the last position's logits divided by --temperature (0: the most likely token),
// among the --top-k most likely when given; the draws come from --seed. Characters are tokens:
// models trained on text only.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <vector>

#include "apps/cli/cli.h"
#include "apps/cli/commands.h"
#include "apps/cli/exit_codes.h"
#include "apps/train/device_choice.h"
#include "apps/train/lm_trainer.h"
#include "core/checkpoint/checkpoint_file.h"
#include "core/error.h"
#include "core/random.h"

namespace alloy::app {

namespace {

po::options_description generate_options() {
  auto group = make_group("Options");
  // clang-format off
  group.add_options()
    ("checkpoint", po::value<std::string>()->required()->value_name("FILE"),
     "a checkpoint of --model gpt trained on --dataset text")
    ("prompt", po::value<std::string>()->default_value("\n", "newline")->value_name("TEXT"),
     "the text to continue; its characters must be in the model's vocabulary")
    ("tokens", po::value<std::int64_t>()->default_value(200)->value_name("N"),
     "characters to generate")
    ("temperature", po::value<double>()->default_value(1.0)->value_name("T"),
     "divides the logits; 0 takes the most likely token")
    ("top-k", po::value<std::int64_t>()->default_value(0)->value_name("K"),
     "draw among the K most likely tokens only (0: all)")
    ("seed", po::value<std::int64_t>()->default_value(1)->value_name("S"), "the draws' seed")
    ("device", po::value<std::string>()->default_value("auto")->value_name("D"),
     "auto, cpu, cuda or cuda:N")
    ("help,h", "print this help and exit");
  // clang-format on
  po::options_description options;
  options.add(group);
  return options;
}

// The next token from the last position's logits.
std::int32_t draw(std::vector<float> logits, double temperature, std::int64_t top_k,
                  Generator& generator) {
  const auto vocab = static_cast<std::int64_t>(logits.size());
  if (temperature == 0.0) {
    return static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) -
                                     logits.begin());
  }
  std::vector<std::int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const std::int64_t keep = top_k > 0 ? std::min(top_k, vocab) : vocab;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                    [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b]; });
  const double top = logits[static_cast<std::size_t>(order[0])] / temperature;
  std::vector<double> weights(static_cast<std::size_t>(keep));
  double total = 0.0;
  for (std::int64_t i = 0; i < keep; ++i) {
    weights[static_cast<std::size_t>(i)] = std::exp(
        logits[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] / temperature - top);
    total += weights[static_cast<std::size_t>(i)];
  }
  double u = generator.uniform() * total;
  for (std::int64_t i = 0; i < keep; ++i) {
    u -= weights[static_cast<std::size_t>(i)];
    if (u < 0.0) return order[static_cast<std::size_t>(i)];
  }
  return order[static_cast<std::size_t>(keep - 1)];
}

}  // namespace

int run_generate(const std::vector<std::string>& args) {
  const auto options = generate_options();
  if (wants_help(args)) {
    print_help("alloy generate --checkpoint FILE [--prompt TEXT] [--tokens N] [options]",
               "Continues a prompt with a GPT trained on text (alloy train --model gpt "
               "--dataset text) and prints the prompt and its continuation.",
               options);
    return kExitSuccess;
  }
  po::variables_map values;
  parse_arguments(args, options, values);
  po::notify(values);
  const std::string path = values["checkpoint"].as<std::string>();
  const std::string prompt = values["prompt"].as<std::string>();
  const std::int64_t tokens = values["tokens"].as<std::int64_t>();
  const double temperature = values["temperature"].as<double>();
  const std::int64_t top_k = values["top-k"].as<std::int64_t>();
  if (tokens < 0) usage_fail("--tokens must be at least 0, got ", tokens);
  if (!(temperature >= 0.0 && std::isfinite(temperature))) {
    usage_fail("--temperature must be finite and at least 0, got ", temperature);
  }
  if (top_k < 0) usage_fail("--top-k must be at least 0, got ", top_k);
  if (prompt.empty()) usage_fail("--prompt must not be empty");

  const checkpoint::CheckpointState state = checkpoint::read_checkpoint(path);
  const models::GptConfig config = gpt_config_of(state, path);
  const std::string vocabulary = vocabulary_of(state);
  ALLOY_CHECK(!vocabulary.empty(), "checkpoint ", path,
              " was trained on token files: alloy generate takes models trained on text");
  std::vector<std::int32_t> context;
  for (const char c : prompt) {
    const std::size_t at = vocabulary.find(c);
    if (at == std::string::npos) {
      usage_fail("--prompt: the character '", std::string(1, c), "' (byte ",
                 static_cast<int>(static_cast<unsigned char>(c)), ") is not in the vocabulary of ",
                 path);
    }
    context.push_back(static_cast<std::int32_t>(at));
  }

  const DeviceChoice device = choose_device(values["device"].as<std::string>());
  make_current(device.device);
  Generator init(0);
  const auto model = models::make_gpt(config, init);
  for (nn::Parameter* param : model->parameters()) {
    const checkpoint::NamedTensor* saved = checkpoint::find_tensor(state.parameters, param->name);
    ALLOY_CHECK(saved != nullptr, "checkpoint ", path, " has no parameter ", param->name);
    checkpoint::restore_tensor(*saved, param->name, param->value);
  }
  model->to_device(device.device);
  model->set_training(false);

  Generator generator(static_cast<std::uint64_t>(values["seed"].as<std::int64_t>()));
  std::cout << prompt << std::flush;
  for (std::int64_t n = 0; n < tokens; ++n) {
    const std::size_t length =
        std::min(context.size(), static_cast<std::size_t>(config.block_size));
    Tensor input = Tensor::empty({1, static_cast<std::int64_t>(length)}, DType::i32);
    std::copy(context.end() - static_cast<std::ptrdiff_t>(length), context.end(),
              input.data<std::int32_t>());
    Tensor placed = Tensor::empty(input.shape(), DType::i32, device.device, MemoryCategory::data);
    placed.copy_from(input);
    const std::vector<float> logits = model->last_logits(model->forward(placed)).to_floats();
    const std::int32_t next = draw(logits, temperature, top_k, generator);
    ALLOY_CHECK(next >= 0 && static_cast<std::size_t>(next) < vocabulary.size(), "checkpoint ",
                path, ": token ", next, " has no character in its vocabulary");
    context.push_back(next);
    std::cout << vocabulary[static_cast<std::size_t>(next)] << std::flush;
  }
  std::cout << std::endl;
  return kExitSuccess;
}

}  // namespace alloy::app
