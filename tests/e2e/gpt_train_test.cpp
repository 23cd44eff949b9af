// alloy train --model gpt end to end on a small generated text: k steps, a checkpoint, k more
// (from a bare --resume) equal 2k steps bit for bit (dropout on); --recompute blocks changes no
// bit; eval and end events; gradient accumulation; the opt levels train to a finite loss; bad
// flags exit 2 and bad token files exit 1 naming the file.
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/e2e/gpt_runs.h"

using namespace alloy;
using namespace alloy::test;

namespace {

int count_events(const std::string& log, const std::string& event) {
  const std::string needle = "{\"event\":\"" + event + "\"";
  int count = 0;
  for (std::size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1))
    ++count;
  return count;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gpt_train)

BOOST_AUTO_TEST_CASE(k_steps_then_k_more_from_a_checkpoint_equal_2k_steps) {
  Corpus corpus;
  const auto args = with(tiny_gpt(corpus.path), {"--dropout", "0.1", "--steps", "8"});
  const ProcessResult straight = run_alloy(with(args, {"--log-json", "-"}));
  BOOST_TEST_REQUIRE(straight.exit_code == 0, straight.errors);
  const std::string digest = json_event_field(straight.output, "end", "params_digest");
  BOOST_TEST_REQUIRE(!digest.empty());

  const std::string dir = corpus.dir.file("ckpt");
  const ProcessResult first = run_alloy(
      with(args, {"--checkpoint-dir", dir, "--checkpoint-every", "4", "--log-json", "-"}));
  BOOST_TEST_REQUIRE(first.exit_code == 0, first.errors);
  BOOST_TEST(json_event_field(first.output, "end", "params_digest") == digest);
  BOOST_TEST(count_events(first.output, "checkpoint") == 2);  // step 4, and the end

  // The checkpoint holds the model, its shape, the data and every setting of the run: a bare
  // --resume continues it.
  const ProcessResult resumed =
      run_alloy({"train", "--resume", dir + "/step-00000004.ckpt", "--log-json", "-"});
  BOOST_TEST_REQUIRE(resumed.exit_code == 0, resumed.errors);
  BOOST_TEST(resumed.errors.find("resuming from") != std::string::npos);
  BOOST_TEST(json_event_field(resumed.output, "end", "params_digest") == digest);
  BOOST_TEST(json_event_field(resumed.output, "start", "steps") == "8");
  // A flag given wins over the checkpoint's setting: two more steps.
  const ProcessResult longer = run_alloy(
      {"train", "--resume", dir + "/step-00000004.ckpt", "--steps", "10", "--log-json", "-"});
  BOOST_TEST_REQUIRE(longer.exit_code == 0, longer.errors);
  BOOST_TEST(json_event_field(longer.output, "end", "step") == "10");
  // A model of another shape refuses the checkpoint, naming it.
  const ProcessResult other = run_alloy(
      with(tiny_gpt(corpus.path, "3"), {"--steps", "8", "--resume", dir + "/step-00000004.ckpt"}));
  BOOST_TEST(other.exit_code == 1);
  BOOST_TEST(other.errors.find("step-00000004.ckpt") != std::string::npos, other.errors);
}

// Each transformer block's backward runs its forward again (the same dropout masks, the same
// sums): the weights come out bit for bit as without recomputation, at O0 and in half.
BOOST_AUTO_TEST_CASE(recomputed_blocks_train_to_the_same_bits) {
  Corpus corpus;
  for (const std::vector<std::string>& level :
       {std::vector<std::string>{"--opt-level", "O0"},
        std::vector<std::string>{"--opt-level", "O2", "--half-dtype", "bf16"}}) {
    const auto args = with(with(tiny_gpt(corpus.path), level),
                           {"--dropout", "0.1", "--steps", "4", "--log-json", "-"});
    const ProcessResult plain = run_alloy(args);
    BOOST_TEST_REQUIRE(plain.exit_code == 0, plain.errors);
    const ProcessResult recomputed = run_alloy(with(args, {"--recompute", "blocks"}));
    BOOST_TEST_REQUIRE(recomputed.exit_code == 0, recomputed.errors);
    const std::string digest = json_event_field(plain.output, "end", "params_digest");
    BOOST_TEST(!digest.empty());
    BOOST_TEST(json_event_field(recomputed.output, "end", "params_digest") == digest, level[1]);
  }
}

// --attention-kernel: a bad value is a usage error naming the flag (train, mem, eval); train,
// mem and eval list it; on the CPU every choice runs Alloy's kernel to the same bits, and the
// start event says so. (On CUDA: tests/core/ops/attention_cudnn_gpu_test.cpp.)
BOOST_AUTO_TEST_CASE(the_attention_kernel_flag_is_checked_and_the_cpu_ignores_it) {
  Corpus corpus;
  for (const auto& args : std::vector<std::vector<std::string>>{
           with(tiny_gpt(corpus.path), {"--steps", "2", "--attention-kernel", "fastest"}),
           {"mem", "--model", "gpt", "--device", "cpu", "--batch-size", "2", "--attention-kernel",
            "fastest"},
           {"eval", "--checkpoint", corpus.path, "--attention-kernel", "fastest"}}) {
    const ProcessResult bad = run_alloy(args);
    BOOST_TEST(bad.exit_code == 2, args[0] << ": " << bad.errors);
    BOOST_TEST(bad.errors.find("--attention-kernel 'fastest' is not one of auto, alloy or cudnn") !=
                   std::string::npos,
               args[0] << ": " << bad.errors);
  }
  for (const char* command : {"train", "mem", "eval"}) {
    const ProcessResult help = run_alloy({command, "--help"});
    BOOST_TEST(help.output.find("--attention-kernel") != std::string::npos, command);
  }
  std::string digest;
  for (const char* kernel : {"auto", "alloy", "cudnn"}) {
    const ProcessResult run =
        run_alloy(with(tiny_gpt(corpus.path), {"--steps", "2", "--device", "cpu", "--log-json", "-",
                                               "--attention-kernel", kernel}));
    BOOST_TEST_REQUIRE(run.exit_code == 0, kernel << ": " << run.errors);
    BOOST_TEST(json_event_field(run.output, "start", "attention_kernel") == "\"alloy\"", kernel);
    const std::string mine = json_event_field(run.output, "end", "params_digest");
    if (digest.empty()) digest = mine;
    BOOST_TEST(mine == digest, kernel);
  }
}

BOOST_AUTO_TEST_CASE(eval_and_end_events_carry_the_losses_and_throughput) {
  Corpus corpus;
  const ProcessResult run =
      run_alloy(with(tiny_gpt(corpus.path), {"--steps", "60", "--eval-every", "30",
                                             "--eval-batches", "2", "--log-json", "-"}));
  BOOST_TEST_REQUIRE(run.exit_code == 0, run.errors);
  BOOST_TEST(count_events(run.output, "eval") == 2);
  BOOST_TEST(json_event_field(run.output, "eval", "step") == "30");
  const double first_val = std::stod(json_event_field(run.output, "eval", "val_loss"));
  const double end_val = std::stod(json_event_field(run.output, "end", "val_loss"));
  BOOST_TEST(std::stod(json_event_field(run.output, "end", "tokens_per_second")) > 0);
  BOOST_TEST(json_event_field(run.output, "end", "step") == "60");
  // Eleven words: the loss falls well below log(vocabulary) within 60 steps.
  BOOST_TEST(end_val < first_val);
  BOOST_TEST(end_val < 2.5);
}

// alloy eval of a GPT checkpoint: the whole validation split's loss, the end event's to the bit,
// from another directory too (the checkpoint names its data by absolute path); flags of the
// other kind of model are usage errors.
BOOST_AUTO_TEST_CASE(eval_gives_the_validation_loss_of_the_end_event) {
  Corpus corpus;
  // Trained in the corpus's directory, naming the text by a relative path.
  std::string command = "cd '" + corpus.dir.path() + "' && exec '" + alloy_binary() + "'";
  for (const std::string& arg :
       with(tiny_gpt("text.txt"), {"--steps", "6", "--checkpoint-dir", "ckpt", "--log-json", "-"}))
    command += " '" + arg + "'";
  const ProcessResult run = run_process("/bin/sh", {"-c", command});
  BOOST_TEST_REQUIRE(run.exit_code == 0, run.errors);
  const std::string file = corpus.dir.file("ckpt/step-00000006.ckpt");
  const ProcessResult eval = run_alloy({"eval", "--checkpoint", file, "--log-json", "-"});
  BOOST_TEST_REQUIRE(eval.exit_code == 0, eval.errors);
  BOOST_TEST(json_event_field(eval.output, "eval", "val_loss") ==
             json_event_field(run.output, "end", "val_loss"));
  BOOST_TEST(json_event_field(eval.output, "eval", "params_digest") ==
             json_event_field(run.output, "end", "params_digest"));
  BOOST_TEST(json_event_field(eval.output, "eval", "val_tokens") == "1999");  // 10% of 20,000
  // The same text elsewhere, given: the same loss.
  std::filesystem::copy_file(corpus.path, corpus.dir.file("moved.txt"));
  const ProcessResult moved = run_alloy({"eval", "--checkpoint", file, "--data-file",
                                         corpus.dir.file("moved.txt"), "--log-json", "-"});
  BOOST_TEST_REQUIRE(moved.exit_code == 0, moved.errors);
  BOOST_TEST(json_event_field(moved.output, "eval", "val_loss") ==
             json_event_field(run.output, "end", "val_loss"));

  const ProcessResult image_flag = run_alloy({"eval", "--checkpoint", file, "--image-size", "28"});
  BOOST_TEST(image_flag.exit_code == 2);
  BOOST_TEST(image_flag.errors.find("--image-size applies to image models") != std::string::npos,
             image_flag.errors);
  const ProcessResult other_data =
      run_alloy({"eval", "--checkpoint", file, "--data-file", corpus.dir.file("missing.txt")});
  BOOST_TEST(other_data.exit_code == 1);
  BOOST_TEST(other_data.errors.find("missing.txt") != std::string::npos, other_data.errors);
}

BOOST_AUTO_TEST_CASE(generate_continues_a_prompt_from_a_checkpoint) {
  Corpus corpus;
  const std::string dir = corpus.dir.file("ckpt");
  const ProcessResult run =
      run_alloy(with(tiny_gpt(corpus.path), {"--steps", "40", "--checkpoint-dir", dir}));
  BOOST_TEST_REQUIRE(run.exit_code == 0, run.errors);
  const std::string file = dir + "/step-00000040.ckpt";
  const auto generate = [&](const std::vector<std::string>& more) {
    return run_alloy(
        with({"generate", "--checkpoint", file, "--prompt", "the ", "--tokens", "30"}, more));
  };
  const ProcessResult a = generate({"--seed", "3"});
  BOOST_TEST_REQUIRE(a.exit_code == 0, a.errors);
  BOOST_TEST(a.output.rfind("the ", 0) == 0);
  BOOST_TEST(a.output.size() == 4u + 30u + 1u);  // prompt, 30 characters, newline
  BOOST_TEST(generate({"--seed", "3"}).output == a.output);
  // Greedy decoding ignores the seed.
  BOOST_TEST(generate({"--temperature", "0", "--seed", "1"}).output ==
             generate({"--temperature", "0", "--seed", "2"}).output);
  const ProcessResult unknown = run_alloy({"generate", "--checkpoint", file, "--prompt", "xyz"});
  BOOST_TEST(unknown.exit_code == 2);
  BOOST_TEST(unknown.errors.find("'x'") != std::string::npos, unknown.errors);
}

// --accumulation-steps N: the same windows and dropout masks as one pass, each micro-batch's
// gradient divided by the step's tokens, so plain SGD (whose step grows with the gradient, unlike
// AdamW's) lands where one pass does, up to rounding; 1 is one pass bit for bit; the checkpoint
// keeps N; a batch N does not divide is a usage error.
BOOST_AUTO_TEST_CASE(accumulated_micro_batches_train_as_one_pass) {
  Corpus corpus;
  const auto args = [&](const std::string& accumulation) {
    return std::vector<std::string>{
        "train",     "--model",      "gpt",       "--dataset",
        "text",      "--data-file",  corpus.path, "--n-layer",
        "2",         "--n-head",     "2",         "--n-embd",
        "16",        "--block-size", "16",        "--batch-size",
        "8",         "--optimizer",  "sgd",       "--lr",
        "0.5",       "--threads",    "2",         "--dropout",
        "0.1",       "--steps",      "6",         "--log-json",
        "-",         "--seed",       "5",         "--accumulation-steps",
        accumulation};
  };
  const ProcessResult one = run_alloy(args("1"));
  BOOST_TEST_REQUIRE(one.exit_code == 0, one.errors);
  std::vector<std::string> plain = args("1");
  plain.resize(plain.size() - 2);
  BOOST_TEST(json_event_field(run_alloy(plain).output, "end", "params_digest") ==
             json_event_field(one.output, "end", "params_digest"));
  const double one_loss = std::stod(json_event_field(one.output, "end", "val_loss"));
  for (const char* accumulation : {"2", "4"}) {
    const ProcessResult split = run_alloy(args(accumulation));
    BOOST_TEST_REQUIRE(split.exit_code == 0, split.errors);
    const double loss = std::stod(json_event_field(split.output, "end", "val_loss"));
    BOOST_TEST(std::abs(loss - one_loss) < 1e-5 * one_loss,
               accumulation << ": " << loss << " vs " << one_loss);
  }

  const std::string dir = corpus.dir.file("ckpt");
  const std::vector<std::string> saving = with(args("2"), {"--checkpoint-dir", dir});
  const ProcessResult saved = run_alloy(with(saving, {"--checkpoint-every", "3"}));
  BOOST_TEST_REQUIRE(saved.exit_code == 0, saved.errors);
  const ProcessResult resumed =
      run_alloy({"train", "--resume", dir + "/step-00000003.ckpt", "--log-json", "-"});
  BOOST_TEST_REQUIRE(resumed.exit_code == 0, resumed.errors);
  BOOST_TEST(json_event_field(resumed.output, "end", "params_digest") ==
             json_event_field(saved.output, "end", "params_digest"));

  const ProcessResult uneven = run_alloy(args("3"));
  BOOST_TEST(uneven.exit_code == 2);
  BOOST_TEST(uneven.errors.find("--batch-size 8 does not split into 3 equal micro-batches") !=
                 std::string::npos,
             uneven.errors);
}

// --ema-decay: the end event adds the weight averages' validation loss; a run resumed from a
// checkpoint continues the averages bit for bit, and alloy eval reports the same loss.
BOOST_AUTO_TEST_CASE(weight_averages_are_evaluated_resumed_and_evaluated_again) {
  Corpus corpus;
  const auto args =
      with(tiny_gpt(corpus.path), {"--dropout", "0.1", "--steps", "8", "--ema-decay", "0.9"});
  const ProcessResult straight = run_alloy(with(args, {"--log-json", "-"}));
  BOOST_TEST_REQUIRE(straight.exit_code == 0, straight.errors);
  const std::string averaged = json_event_field(straight.output, "end", "val_loss_ema");
  BOOST_TEST_REQUIRE(!averaged.empty(), straight.output);
  BOOST_TEST(averaged != json_event_field(straight.output, "end", "val_loss"));

  const std::string dir = corpus.dir.file("ckpt");
  const ProcessResult saved =
      run_alloy(with(args, {"--checkpoint-dir", dir, "--checkpoint-every", "4"}));
  BOOST_TEST_REQUIRE(saved.exit_code == 0, saved.errors);
  const ProcessResult resumed =
      run_alloy({"train", "--resume", dir + "/step-00000004.ckpt", "--log-json", "-"});
  BOOST_TEST_REQUIRE(resumed.exit_code == 0, resumed.errors);
  BOOST_TEST(json_event_field(resumed.output, "end", "val_loss_ema") == averaged);
  const ProcessResult eval =
      run_alloy({"eval", "--checkpoint", dir + "/step-00000008.ckpt", "--log-json", "-"});
  BOOST_TEST_REQUIRE(eval.exit_code == 0, eval.errors);
  BOOST_TEST(json_event_field(eval.output, "eval", "val_loss_ema") == averaged);
}

// --label-smoothing reaches the tied head's loss (the weights differ from an unsmoothed run's),
// and the checkpoint keeps it: a bare resume continues the smoothed run bit for bit.
BOOST_AUTO_TEST_CASE(label_smoothing_trains_and_resumes) {
  Corpus corpus;
  const auto args = with(tiny_gpt(corpus.path), {"--steps", "6", "--log-json", "-"});
  const ProcessResult plain = run_alloy(args);
  BOOST_TEST_REQUIRE(plain.exit_code == 0, plain.errors);
  const std::string dir = corpus.dir.file("ckpt");
  const ProcessResult smoothed = run_alloy(
      with(args, {"--label-smoothing", "0.1", "--checkpoint-dir", dir, "--checkpoint-every", "3"}));
  BOOST_TEST_REQUIRE(smoothed.exit_code == 0, smoothed.errors);
  const std::string digest = json_event_field(smoothed.output, "end", "params_digest");
  BOOST_TEST(digest != json_event_field(plain.output, "end", "params_digest"));
  const ProcessResult resumed =
      run_alloy({"train", "--resume", dir + "/step-00000003.ckpt", "--log-json", "-"});
  BOOST_TEST_REQUIRE(resumed.exit_code == 0, resumed.errors);
  BOOST_TEST(json_event_field(resumed.output, "end", "params_digest") == digest);
}

BOOST_AUTO_TEST_CASE(every_opt_level_trains_to_a_finite_loss) {
  Corpus corpus;
  for (const auto& level :
       std::vector<std::vector<std::string>>{{"--opt-level", "O1"},
                                             {"--opt-level", "O2"},
                                             {"--opt-level", "O2", "--half-dtype", "bf16"},
                                             {"--opt-level", "O3"},
                                             {"--opt-level", "O3", "--half-dtype", "bf16"}}) {
    const ProcessResult run =
        run_alloy(with(with(tiny_gpt(corpus.path), {"--steps", "6", "--log-json", "-"}), level));
    BOOST_TEST_REQUIRE(run.exit_code == 0, run.errors);
    const std::string loss = json_event_field(run.output, "end", "val_loss");
    BOOST_TEST((!loss.empty() && loss != "null"), level[1] << " " << run.output);
    BOOST_TEST(std::stod(loss) < 3.5, level[1]);
  }
}

BOOST_AUTO_TEST_CASE(bad_flags_exit_2_and_bad_token_files_exit_1_naming_the_file) {
  Corpus corpus;
  const ProcessResult heads = run_alloy(with(tiny_gpt(corpus.path, "2", "3"), {"--steps", "2"}));
  BOOST_TEST(heads.exit_code == 2);
  BOOST_TEST(heads.errors.find("--n-embd 16 is not divisible by --n-head 3") != std::string::npos,
             heads.errors);
  const ProcessResult no_steps = run_alloy(tiny_gpt(corpus.path));
  BOOST_TEST(no_steps.exit_code == 2);
  BOOST_TEST(no_steps.errors.find("--steps") != std::string::npos, no_steps.errors);

  // The sequence models' flags are refused for the image models.
  const ProcessResult lenet = run_alloy({"train", "--model", "lenet", "--n-layer", "2"});
  BOOST_TEST(lenet.exit_code == 2);
  BOOST_TEST(lenet.errors.find("--n-layer applies to sequence models") != std::string::npos,
             lenet.errors);

  const std::string bad = corpus.dir.file("bad.bin");
  std::ofstream(bad, std::ios::binary) << std::string(1024, 'x');
  const ProcessResult magic =
      run_alloy({"train", "--model", "gpt", "--dataset", "tokens", "--data-file", bad, "--n-layer",
                 "1", "--n-head", "1", "--n-embd", "8", "--block-size", "4", "--steps", "1"});
  BOOST_TEST(magic.exit_code == 1);
  BOOST_TEST(magic.errors.find(bad + ": bad magic") != std::string::npos, magic.errors);
}

BOOST_AUTO_TEST_SUITE_END()
