// alloy ckpt info FILE [--json] | verify FILE | export FILE --safetensors OUT: describes a
// checkpoint, checks it (header, CRC, archive, and the params_digest against the weights it
// holds), or writes its weights in the safetensors format. FILE may also be a sharded
// checkpoint's step directory or manifest (core/checkpoint/sharded_checkpoint.h).
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "apps/cli/cli.h"
#include "apps/cli/commands.h"
#include "apps/cli/exit_codes.h"
#include "apps/cli/json_log.h"
#include "apps/train/sharded_checkpoints.h"
#include "apps/train/training_state.h"
#include "core/checkpoint/checkpoint_file.h"
#include "core/checkpoint/safetensors.h"
#include "core/checkpoint/sharded_checkpoint.h"
#include "core/error.h"

namespace alloy::app {

namespace {

namespace ckpt = alloy::checkpoint;

po::options_description ckpt_options() {
  auto group = make_group("Options");
  // clang-format off
  group.add_options()
    ("json", po::bool_switch(), "info: print one JSON object (with params_digest)")
    ("safetensors", po::value<std::string>()->value_name("OUT"),
     "export: the safetensors file to write")
    ("ema", po::bool_switch(),
     "export: the weight averages of a run with --ema-decay, in place of its weights")
    ("help,h", "print this help and exit");
  // clang-format on
  po::options_description options;
  options.add(group);
  return options;
}

std::string hex32(std::uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "%08x", value);
  return text;
}

std::int64_t element_count(const std::vector<ckpt::NamedTensor>& tensors) {
  std::int64_t count = 0;
  for (const auto& tensor : tensors)
    count += tensor.numel();
  return count;
}

const char* yes_no(bool flag) {
  return flag ? "true" : "false";
}

// The state's keys of info --json; `parameter_tensors` and `parameters` count the weights.
void add_state_json(JsonObject& o, const ckpt::CheckpointState& s, std::int64_t parameter_tensors,
                    std::int64_t parameters) {
  o.add("alloy_version", s.alloy_version)
      .add("model", s.model)
      .add("opt_level", s.amp.opt_level)
      .add("half_dtype", s.amp.half_dtype)
      .add("model_dtype", s.amp.model_dtype)
      .add("cast_policy", s.amp.cast_policy)
      .add("keep_batchnorm_fp32", s.amp.keep_batchnorm_fp32)
      .add("master_weights", s.amp.master_weights)
      .add("dynamic_loss_scale", s.amp.dynamic_loss_scale)
      .add("static_loss_scale", static_cast<double>(s.amp.static_scale))
      .add("init_loss_scale", static_cast<double>(s.amp.init_scale))
      .add("scale_window", s.amp.scale_window)
      .add("min_loss_scale", static_cast<double>(s.amp.min_scale))
      .add("max_loss_scale", static_cast<double>(s.amp.max_scale))
      .add("epoch", s.epoch)
      .add("step", s.step)
      .add("step_in_epoch", s.step_in_epoch)
      .add("world_size", s.world_size)
      .add("seed", static_cast<std::int64_t>(s.seed))
      .add("batch_size", s.batch_size)
      .add("loss_scale", static_cast<double>(s.scaler.scale))
      .add("scaler_clean_steps", static_cast<std::int64_t>(s.scaler.clean_steps))
      .add("skipped_steps", static_cast<std::int64_t>(s.scaler.skipped_steps))
      .add("optimizer", s.optimizer.kind)
      .add("lr", static_cast<double>(s.optimizer.lr))
      .add("momentum", static_cast<double>(s.optimizer.momentum))
      .add("weight_decay", static_cast<double>(s.optimizer.weight_decay))
      .add("optimizer_steps", s.optimizer.steps)
      .add("parameter_tensors", parameter_tensors)
      .add("parameters", parameters)
      .add("buffer_tensors", static_cast<std::int64_t>(s.buffers.size()))
      .add("optimizer_state_tensors", static_cast<std::int64_t>(s.optimizer_state.size()))
      .add("rng_states", static_cast<std::int64_t>(s.rng_states.size()))
      .add("params_digest", s.params_digest);
  for (const auto& [key, value] : ckpt::extra_entries(s))
    o.add("extra." + key, value);
  o.add("model_description", s.model_description);
}

void print_info_json(const std::string& path, const ckpt::CheckpointHeader& header,
                     const ckpt::CheckpointState& s) {
  JsonObject o;
  o.add("path", path)
      .add("format_version", static_cast<std::int64_t>(header.format_version))
      .add("payload_bytes", static_cast<std::int64_t>(header.payload_bytes))
      .add("payload_crc", hex32(header.payload_crc));
  add_state_json(o, s, static_cast<std::int64_t>(s.parameters.size()), element_count(s.parameters));
  std::cout << o.str() << std::endl;
}

// The lines of info after the first ones; `parameter_tensors` and `parameters` count the weights.
void print_state(const ckpt::CheckpointState& s, std::int64_t parameter_tensors,
                 std::int64_t parameters) {
  std::cout << "  model " << s.model << ": " << parameters << " parameters in " << parameter_tensors
            << " tensors, " << s.buffers.size() << " buffers\n"
            << "  opt level " << s.amp.opt_level << ": model " << s.amp.model_dtype << ", half "
            << s.amp.half_dtype << ", cast_policy " << yes_no(s.amp.cast_policy)
            << ", keep_batchnorm_fp32 " << yes_no(s.amp.keep_batchnorm_fp32) << ", master_weights "
            << yes_no(s.amp.master_weights) << ", loss scale "
            << (s.amp.dynamic_loss_scale ? "dynamic" : "static") << "\n"
            << "  epoch " << s.epoch << " done, step " << s.step << ", step in epoch "
            << s.step_in_epoch << ", world size " << s.world_size << ", seed " << s.seed
            << ", batch size " << s.batch_size << "\n"
            << "  loss scaler: scale " << s.scaler.scale << ", clean steps " << s.scaler.clean_steps
            << ", skipped steps " << s.scaler.skipped_steps << "\n"
            << "  optimizer " << s.optimizer.kind << ": lr " << s.optimizer.lr << ", momentum "
            << s.optimizer.momentum << ", weight_decay " << s.optimizer.weight_decay << ", "
            << s.optimizer.steps << " steps, " << s.optimizer_state.size() << " state tensors\n";
  std::cout << "  rng states:";
  for (const auto& rng : s.rng_states)
    std::cout << " " << rng.name;
  std::cout << "\n";
  for (const auto& [key, value] : ckpt::extra_entries(s))
    std::cout << "  " << key << ": " << value << "\n";
  std::cout << "  params_digest " << s.params_digest << "\n  model:\n";
  std::string line;
  for (const char c : s.model_description) {
    if (c == '\n') {
      std::cout << "    " << line << "\n";
      line.clear();
    } else {
      line += c;
    }
  }
  if (!line.empty()) std::cout << "    " << line << "\n";
  std::cout << std::flush;
}

void print_info(const std::string& path, const ckpt::CheckpointHeader& header,
                const ckpt::CheckpointState& s) {
  std::cout << path << "\n"
            << "  format version " << header.format_version << ", payload " << header.payload_bytes
            << " bytes, CRC-32 " << hex32(header.payload_crc) << ", written by alloy "
            << s.alloy_version << "\n";
  print_state(s, static_cast<std::int64_t>(s.parameters.size()), element_count(s.parameters));
}

std::string describe_shard(const ckpt::ShardEntry& shard) {
  return detail::concat(shard.file, " [", shard.begin, ", ", shard.end, ") ", shard.bytes,
                        " bytes, CRC-32 ", hex32(shard.crc));
}

std::vector<std::string> kind_names(const ckpt::Manifest& m) {
  std::vector<std::string> names;
  for (const ckpt::FlatKind& kind : m.kinds)
    names.push_back(kind.name + " " + dtype_name(kind.dtype));
  return names;
}

// info of a sharded checkpoint: the manifest, then the state every rank shares.
void print_sharded_info(const std::string& path, const ckpt::Manifest& m,
                        const ckpt::CheckpointState& shared, bool json) {
  const auto tensors = static_cast<std::int64_t>(m.parameters.size());
  if (json) {
    JsonObject o;
    std::vector<std::string> shards;
    for (const ckpt::ShardEntry& shard : m.shards)
      shards.push_back(describe_shard(shard));
    o.add("path", path)
        .add("sharded", true)
        .add("shards", shards)
        .add("kinds", kind_names(m))
        .add("flat_elements", m.total)
        .add("chunk_elements", m.chunk_elements);
    add_state_json(o, shared, tensors, m.total);
    std::cout << o.str() << std::endl;
    return;
  }
  std::cout << path << "\n"
            << "  sharded: world size " << m.world_size << ", " << m.total
            << " flat elements, CRC-32 per chunk of " << m.chunk_elements << " elements\n"
            << "  kinds:";
  for (const std::string& kind : kind_names(m))
    std::cout << " " << kind;
  std::cout << "\n";
  for (const ckpt::ShardEntry& shard : m.shards)
    std::cout << "  rank " << shard.rank << ": " << describe_shard(shard) << "\n";
  std::cout << "  written by alloy " << shared.alloy_version << "\n";
  print_state(shared, tensors, m.total);
}

// Throws when the stored params_digest does not match the stored weights.
void check_digest(const std::string& path, const ckpt::CheckpointState& state) {
  const std::string digest = stored_params_digest(state);
  ALLOY_CHECK(digest == state.params_digest, "checkpoint ", path, ": corrupt: its params_digest ",
              state.params_digest, " does not match its parameters (", digest, ")");
}

// export: the weights (or with --ema their averages) and buffers as safetensors.
void export_state(const std::string& path, const ckpt::CheckpointState& state,
                  const po::variables_map& values, bool averages) {
  const std::string out = values["safetensors"].as<std::string>();
  if (out.empty()) usage_fail("--safetensors needs a file name");
  if (averages) {
    ckpt::export_safetensors(with_weight_averages(state, path), out, {{"weights", "ema"}});
  } else {
    ckpt::export_safetensors(state, out);
  }
  std::cout << "wrote " << out << ": " << (averages ? "the averages of " : "")
            << state.parameters.size() << " parameters and " << state.buffers.size()
            << " buffers of " << state.model << " at step " << state.step << std::endl;
}

}  // namespace

int run_ckpt(const std::vector<std::string>& args) {
  const auto options = ckpt_options();
  if (wants_help(args)) {
    print_help(
        "alloy ckpt info FILE [--json] | alloy ckpt verify FILE |\n"
        "       alloy ckpt export FILE --safetensors OUT [--ema]",
        "info describes a checkpoint (header, opt level, position, scaler, optimizer,\n"
        "params_digest); verify checks its header, CRC, contents and params_digest;\n"
        "export writes its fp32 weights and buffers as a safetensors file (with --ema, the\n"
        "weight averages of a run with --ema-decay, under the same names). FILE may be a\n"
        "sharded checkpoint's step directory or its manifest: info prints the manifest, verify\n"
        "reads every shard whole and checks each CRC and the shard boundaries.",
        options);
    return kExitSuccess;
  }
  po::options_description all = options;
  all.add_options()("words", po::value<std::vector<std::string>>(), "");
  po::variables_map values;
  parse_arguments(args, all, values, "words");
  po::notify(values);
  const auto words = values.count("words") ? values["words"].as<std::vector<std::string>>()
                                           : std::vector<std::string>{};
  if (words.empty() || (words[0] != "info" && words[0] != "verify" && words[0] != "export")) {
    usage_fail("alloy ckpt needs an action: info FILE, verify FILE or export FILE");
  }
  const std::string& action = words[0];
  if (words.size() != 2) usage_fail("alloy ckpt ", action, " takes exactly one FILE");
  const bool json = values["json"].as<bool>();
  if (action != "info" && json) usage_fail("--json applies to info only");
  const bool has_out = values.count("safetensors") != 0;
  if (action == "export" && !has_out) usage_fail("alloy ckpt export needs --safetensors OUT");
  if (action != "export" && has_out) usage_fail("--safetensors applies to export only");
  const bool averages = values["ema"].as<bool>();
  if (action != "export" && averages) usage_fail("--ema applies to export only");

  const std::string& path = words[1];
  // A directory can only be a sharded checkpoint's step directory; one without its manifest is
  // an incomplete save, and read_manifest says so.
  if (ckpt::is_sharded_checkpoint(path) || std::filesystem::is_directory(path)) {
    const std::string step_dir = ckpt::step_dir_of(path);
    const ckpt::Manifest manifest = ckpt::read_manifest(path);
    if (action == "info") {
      print_sharded_info(path, manifest, ckpt::read_shared_state(manifest, step_dir), json);
      return kExitSuccess;
    }
    check_shard_boundaries(manifest, path);
    ckpt::verify_sharded_checkpoint(manifest, step_dir);
    const ckpt::CheckpointState state = ckpt::gather_sharded_state(manifest, step_dir);
    check_digest(path, state);
    if (action == "verify") {
      std::cout << path << ": ok (sharded: " << manifest.world_size << " shards of "
                << manifest.total << " flat elements, every CRC matches, " << state.model
                << " at step " << state.step << ", params_digest " << state.params_digest << ")"
                << std::endl;
    } else {
      export_state(path, state, values, averages);
    }
    return kExitSuccess;
  }
  ckpt::CheckpointHeader header;
  const ckpt::CheckpointState state = ckpt::read_checkpoint(path, &header);
  if (action == "info") {
    json ? print_info_json(path, header, state) : print_info(path, header, state);
  } else if (action == "verify") {
    check_digest(path, state);
    std::cout << path << ": ok (format version " << header.format_version << ", "
              << header.payload_bytes << " payload bytes, CRC-32 " << hex32(header.payload_crc)
              << ", " << state.model << " at step " << state.step << ", params_digest "
              << state.params_digest << ")" << std::endl;
  } else {
    check_digest(path, state);
    export_state(path, state, values, averages);
  }
  return kExitSuccess;
}

}  // namespace alloy::app
