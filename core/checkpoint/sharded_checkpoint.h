// Sharded checkpoints: one file per rank and a manifest, for runs whose weights and optimizer
// state are split across ranks (ZeRO), readable at any world size.
//
//   DIR/step-%08d/rank-%05d.ckpt   one per rank, written by that rank
//   DIR/step-%08d/manifest         written last, by rank 0, once every shard is durable
//
// The flat parameter space is the canonical parameters in registration order, concatenated: N
// elements, parameter i at the sum of the sizes before it. Each *kind* ("param" for the weights,
// then an optimizer state by its suffix: "exp_avg", "exp_avg_sq", "momentum_buffer") is one
// flat tensor over that space. Shard r holds [begin_r, end_r) of every kind.
//
// A shard file has the header of checkpoint_file.h (magic, format version, payload bytes, CRC-32
// of the payload); its payload is each kind's range, raw little-endian, in the manifest's kind
// order, then the Boost archive of the state every rank shares (serialize_state of a
// CheckpointState without the flat tensors: buffers, the optimizer's scalars and non-flat state,
// the scaler, the position, params_digest, the run's records). The manifest is text (one record
// a line, ending in a CRC-32 of the lines before it): the world size, N, the parameter table,
// the kinds with their dtypes and, per shard, its boundaries, file size and CRC, each kind's byte
// offset in the file with a CRC-32 of every chunk of `chunk_elements` elements, and the shared
// state's offset, size and CRC. A range read reads only the chunks that intersect the range (at
// most one chunk beyond it at either end of each shard) and checks each chunk's CRC; `verify`
// reads every shard whole and checks the file's CRC too.
//
// A step directory without a manifest is no checkpoint: every reader ignores it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"

namespace alloy::checkpoint {

inline constexpr char kManifestName[] = "manifest";
inline constexpr char kParamKind[] = "param";
// 256 KiB of fp32 per checked chunk: a range read reads at most that much extra at either end.
inline constexpr std::int64_t kDefaultChunkElements = 65536;

// One canonical parameter in the flat space.
struct FlatParameter {
  std::string name;
  Shape shape;
  DType dtype = DType::f32;  // of the flat kinds' elements (the canonical fp32 weights)
  std::int64_t offset = 0;
  std::int64_t numel = 0;
};

// The table of `parameters` (name, shape) laid out one after another from offset 0, in order.
std::vector<FlatParameter> flat_layout(const std::vector<TensorSpec>& parameters);

struct FlatKind {
  std::string name;
  DType dtype = DType::f32;
};

// One kind's range in a shard file.
struct ShardSection {
  std::string kind;
  std::uint64_t offset = 0;         // bytes from the start of the file
  std::vector<std::uint32_t> crcs;  // CRC-32 of each chunk_elements-element chunk, in order
};

// What one rank wrote; what the manifest says about its file.
struct ShardEntry {
  std::int64_t rank = 0;
  std::int64_t begin = 0;  // [begin, end) of the flat space
  std::int64_t end = 0;
  std::string file;  // name inside the step directory
  std::uint64_t bytes = 0;
  std::uint32_t crc = 0;               // the header's CRC-32 of the payload
  std::vector<ShardSection> sections;  // one per kind, in the manifest's kind order
  std::uint64_t state_offset = 0;
  std::uint64_t state_bytes = 0;
  std::uint32_t state_crc = 0;
};

struct Manifest {
  std::int64_t step = 0;
  std::int64_t world_size = 0;
  std::int64_t total = 0;  // N
  std::int64_t chunk_elements = kDefaultChunkElements;
  std::vector<FlatKind> kinds;
  std::vector<FlatParameter> parameters;
  std::vector<ShardEntry> shards;  // by rank
};

// A flat kind's range of one rank: `data` holds (end - begin) elements of `dtype`.
struct FlatRange {
  std::string kind;
  DType dtype = DType::f32;
  std::vector<unsigned char> data;
};

// DIR/step-00000042
std::string sharded_checkpoint_dir(const std::string& dir, std::int64_t step);
// rank-00003.ckpt
std::string shard_file_name(std::int64_t rank);

// Writes rank `rank`'s shard of [begin, end) into `step_dir` (created if missing) atomically:
// `ranges` in order (each end - begin elements; the kinds every rank writes, in the same order)
// and `shared`, the state every rank holds (its parameters and the flat kinds' optimizer state
// left out). Returns the entry the manifest records. Throws naming the file.
ShardEntry write_shard(const std::string& step_dir, std::int64_t rank, std::int64_t begin,
                       std::int64_t end, const std::vector<FlatRange>& ranges,
                       const CheckpointState& shared,
                       std::int64_t chunk_elements = kDefaultChunkElements);

// A shard entry as text and back, for gathering every rank's entry to rank 0.
std::string encode_shard_entry(const ShardEntry& entry);
ShardEntry decode_shard_entry(const std::string& text);

// Writes `manifest` into `step_dir` atomically. Checks it first (check_manifest): the last
// write of a save, once every shard is durable.
void write_manifest(const std::string& step_dir, const Manifest& manifest);

// The manifest of a step directory (or the manifest file itself), checked for consistency:
// boundaries that tile [0, N) in rank order, a parameter table that tiles it too, every kind in
// every shard with the chunk CRCs its range needs. Throws "checkpoint PATH: ..." naming the
// manifest. Does not open the shard files.
Manifest read_manifest(const std::string& step_dir_or_manifest);

// The step directory of a manifest path or a step directory.
std::string step_dir_of(const std::string& step_dir_or_manifest);

// Throws when `manifest` is inconsistent (read_manifest's checks); `name` labels the errors.
void check_manifest(const Manifest& manifest, const std::string& name);

// Elements [begin, end) of `kind` read from the shard files that hold them: only the chunks
// that intersect the range, each checked against its CRC. Throws naming the shard file for a
// missing, short or damaged file.
std::vector<unsigned char> read_flat_range(const Manifest& manifest, const std::string& step_dir,
                                           const std::string& kind, std::int64_t begin,
                                           std::int64_t end);

// The shared state, read from rank 0's file and checked against its CRC: the parameters and
// the flat kinds' optimizer state are empty.
CheckpointState read_shared_state(const Manifest& manifest, const std::string& step_dir);

// The whole checkpoint as one plain state: the shared state with every parameter and, per
// kind other than "param", every parameter's "<name>.<kind>" optimizer state, cut out of the
// flat space by the parameter table. What a run without sharding resumes from.
CheckpointState gather_sharded_state(const Manifest& manifest, const std::string& step_dir);

// Elements [begin, end) of `kind` of a plain state, assembled from its full tensors by
// `parameters` (the reverse of gather_sharded_state): what a sharded run resumes from a plain
// checkpoint with. Throws naming the tensor when the state lacks one.
std::vector<unsigned char> flat_range_of_state(const CheckpointState& state,
                                               const std::vector<FlatParameter>& parameters,
                                               const std::string& kind, std::int64_t begin,
                                               std::int64_t end);

// Throws naming the first shard file that is missing or not of the manifest's size.
void check_shard_files(const Manifest& manifest, const std::string& step_dir);

// Reads every shard whole: present, of the manifest's size, its header and CRC, every chunk's
// CRC and the shared state. Throws naming the first file that fails.
void verify_sharded_checkpoint(const Manifest& manifest, const std::string& step_dir);

// True when `path` is a step directory holding a manifest, or a manifest file.
bool is_sharded_checkpoint(const std::string& path);

}  // namespace alloy::checkpoint
