#include "core/checkpoint/sharded_checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <string_view>
#include <system_error>

#include "core/checkpoint/checkpoint_file.h"
#include "core/checkpoint/posix_file.h"
#include "core/error.h"

namespace alloy::checkpoint {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kManifestTitle = "alloy-sharded-checkpoint";
constexpr int kManifestVersion = 1;

template <class... Parts>
[[noreturn]] void fail_file(const std::string& name, Parts&&... parts) {
  fail("checkpoint ", name, ": ", std::forward<Parts>(parts)...);
}

std::string hex32(std::uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "%08x", value);
  return text;
}

std::int64_t chunk_count(std::int64_t elements, std::int64_t chunk_elements) {
  return (elements + chunk_elements - 1) / chunk_elements;
}

std::string_view as_text(const std::vector<unsigned char>& bytes, std::size_t offset = 0,
                         std::size_t size = std::string_view::npos) {
  const std::string_view all(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return all.substr(offset, size);
}

// The CRC-32 of each `chunk_bytes`-byte chunk of `bytes` (the last may be shorter).
std::vector<std::uint32_t> chunk_crcs(std::string_view bytes, std::size_t chunk_bytes) {
  std::vector<std::uint32_t> crcs;
  for (std::size_t at = 0; at < bytes.size(); at += chunk_bytes) {
    crcs.push_back(crc32_of(bytes.substr(at, chunk_bytes)));
  }
  return crcs;
}

// Names go into the manifest's space-separated lines.
void check_name(const std::string& name, const char* what) {
  ALLOY_CHECK(!name.empty() && std::none_of(name.begin(), name.end(),
                                            [](char c) { return c == ' ' || c == '\n'; }),
              "sharded checkpoint: ", what, " name '", name, "' is empty or holds a space");
}

std::string shape_text(const Shape& shape) {
  if (shape.empty()) return "-";
  std::string text;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ',';
    text += std::to_string(shape[i]);
  }
  return text;
}

void append_entry(std::ostringstream& out, const ShardEntry& e) {
  out << "shard " << e.rank << ' ' << e.begin << ' ' << e.end << ' ' << e.file << ' ' << e.bytes
      << ' ' << hex32(e.crc) << ' ' << e.state_offset << ' ' << e.state_bytes << ' '
      << hex32(e.state_crc) << '\n';
  for (const ShardSection& section : e.sections) {
    out << "section " << e.rank << ' ' << section.kind << ' ' << section.offset << ' ';
    if (section.crcs.empty()) out << '-';
    for (std::size_t i = 0; i < section.crcs.size(); ++i) {
      if (i > 0) out << ',';
      out << hex32(section.crcs[i]);
    }
    out << '\n';
  }
}

// Reads the manifest's lines: each a keyword and space-separated fields, every field checked.
class LineParser {
 public:
  LineParser(std::string_view text, std::string name) : text_(text), name_(std::move(name)) {}

  // The next line's fields; false at the end.
  bool next(std::vector<std::string_view>& fields) {
    if (at_ >= text_.size()) return false;
    std::size_t end = text_.find('\n', at_);
    if (end == std::string_view::npos) corrupt("the last line has no newline");
    std::string_view line = text_.substr(at_, end - at_);
    at_ = end + 1;
    ++line_;
    fields.clear();
    std::size_t start = 0;
    while (start <= line.size()) {
      const std::size_t space = std::min(line.find(' ', start), line.size());
      fields.push_back(line.substr(start, space - start));
      if (fields.back().empty()) corrupt("an empty field");
      start = space + 1;
    }
    return true;
  }

  template <class Int>
  Int integer(std::string_view text, int base = 10) const {
    Int value{};
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
    if (error != std::errc() || end != text.data() + text.size()) {
      corrupt("'", text, "' is not a number");
    }
    return value;
  }
  std::int64_t count(std::string_view text) const {
    const auto value = integer<std::int64_t>(text);
    if (value < 0) corrupt("negative count ", value);
    return value;
  }
  std::uint32_t crc(std::string_view text) const {
    if (text.size() != 8) corrupt("'", text, "' is not a CRC-32");
    return integer<std::uint32_t>(text, 16);
  }
  DType dtype(std::string_view text) const {
    try {
      return parse_dtype(std::string(text));
    } catch (const Error&) {
      corrupt("unknown dtype '", text, "'");
    }
  }
  Shape shape(std::string_view text) const {
    Shape shape;
    if (text == "-") return shape;
    std::size_t start = 0;
    while (start <= text.size()) {
      const std::size_t comma = std::min(text.find(',', start), text.size());
      shape.push_back(count(text.substr(start, comma - start)));
      start = comma + 1;
    }
    return shape;
  }
  void expect(const std::vector<std::string_view>& fields, std::size_t size) const {
    if (fields.size() != size) {
      corrupt("'", fields[0], "' has ", fields.size() - 1, " fields, not ", size - 1);
    }
  }

  template <class... Parts>
  [[noreturn]] void corrupt(Parts&&... parts) const {
    fail_file(name_, "corrupt manifest: line ", line_, ": ", std::forward<Parts>(parts)...);
  }

 private:
  std::string_view text_;
  std::string name_;
  std::size_t at_ = 0;
  std::size_t line_ = 0;
};

ShardEntry& entry_of(std::vector<ShardEntry>& shards, const LineParser& parser,
                     std::string_view rank_text) {
  const std::int64_t rank = parser.count(rank_text);
  for (ShardEntry& entry : shards) {
    if (entry.rank == rank) return entry;
  }
  parser.corrupt("a section of rank ", rank, " before its shard line");
}

// Parses the shard and section lines of `text` into `shards` (lines of other keywords go to
// `other`, which fails on them when null).
void parse_lines(LineParser& parser, std::vector<ShardEntry>& shards,
                 const std::function<void(const std::vector<std::string_view>&)>& other) {
  std::vector<std::string_view> f;
  while (parser.next(f)) {
    if (f[0] == "shard") {
      parser.expect(f, 10);
      ShardEntry e;
      e.rank = parser.count(f[1]);
      e.begin = parser.count(f[2]);
      e.end = parser.count(f[3]);
      e.file = std::string(f[4]);
      e.bytes = static_cast<std::uint64_t>(parser.count(f[5]));
      e.crc = parser.crc(f[6]);
      e.state_offset = static_cast<std::uint64_t>(parser.count(f[7]));
      e.state_bytes = static_cast<std::uint64_t>(parser.count(f[8]));
      e.state_crc = parser.crc(f[9]);
      shards.push_back(std::move(e));
    } else if (f[0] == "section") {
      parser.expect(f, 5);
      ShardSection section;
      section.kind = std::string(f[2]);
      section.offset = static_cast<std::uint64_t>(parser.count(f[3]));
      if (f[4] != "-") {
        std::size_t start = 0;
        while (start <= f[4].size()) {
          const std::size_t comma = std::min(f[4].find(',', start), f[4].size());
          section.crcs.push_back(parser.crc(f[4].substr(start, comma - start)));
          start = comma + 1;
        }
      }
      entry_of(shards, parser, f[1]).sections.push_back(std::move(section));
    } else if (other) {
      other(f);
    } else {
      parser.corrupt("unexpected '", f[0], "'");
    }
  }
}

std::size_t kind_index(const Manifest& m, const std::string& kind, const std::string& name) {
  for (std::size_t i = 0; i < m.kinds.size(); ++i) {
    if (m.kinds[i].name == kind) return i;
  }
  fail_file(name, "holds no kind '", kind, "'");
}

// An open shard file whose size is the manifest's.
FileDescriptor open_shard(const ShardEntry& entry, const std::string& step_dir, std::string& path) {
  path = (fs::path(step_dir) / entry.file).string();
  std::uint64_t bytes = 0;
  FileDescriptor file =
      open_checkpoint_file(path, "missing shard of rank " + std::to_string(entry.rank), bytes);
  if (bytes < entry.bytes) {
    fail_file(path, "truncated: ", bytes, " bytes, the manifest says ", entry.bytes);
  }
  if (bytes > entry.bytes) {
    fail_file(path, "corrupt: ", bytes, " bytes, the manifest says ", entry.bytes);
  }
  return file;
}

std::vector<unsigned char> read_exactly(const FileDescriptor& file, std::uint64_t offset,
                                        std::uint64_t size) {
  std::vector<unsigned char> bytes(size);
  const std::size_t got = file.read_up_to_at(bytes.data(), bytes.size(), offset);
  if (got != bytes.size()) {
    fail_file(file.path(), "truncated: ", got, " of ", size, " bytes at offset ", offset);
  }
  return bytes;
}

CheckpointState shared_state_of(const FileDescriptor& file, const ShardEntry& entry) {
  const std::vector<unsigned char> bytes =
      read_exactly(file, entry.state_offset, entry.state_bytes);
  if (crc32_of(as_text(bytes)) != entry.state_crc) {
    fail_file(file.path(), "corrupt: CRC mismatch in the shared state");
  }
  try {
    return deserialize_state(as_text(bytes));
  } catch (const Error& error) {
    fail_file(file.path(), error.what());
  }
}

}  // namespace

std::vector<FlatParameter> flat_layout(const std::vector<TensorSpec>& parameters) {
  std::vector<FlatParameter> table;
  std::int64_t offset = 0;
  for (const TensorSpec& spec : parameters) {
    const std::int64_t numel = shape_numel(spec.shape);
    table.push_back({spec.name, spec.shape, DType::f32, offset, numel});
    offset += numel;
  }
  return table;
}

std::string sharded_checkpoint_dir(const std::string& dir, std::int64_t step) {
  ALLOY_CHECK(step >= 0, "checkpoint step ", step, " is negative");
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return (fs::path(dir) / name).string();
}

std::string shard_file_name(std::int64_t rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05lld.ckpt", static_cast<long long>(rank));
  return name;
}

ShardEntry write_shard(const std::string& step_dir, std::int64_t rank, std::int64_t begin,
                       std::int64_t end, const std::vector<FlatRange>& ranges,
                       const CheckpointState& shared, std::int64_t chunk_elements) {
  ALLOY_CHECK(rank >= 0 && 0 <= begin && begin <= end && chunk_elements >= 1,
              "sharded checkpoint: bad shard of rank ", rank, " [", begin, ", ", end,
              ") with chunks of ", chunk_elements);
  ShardEntry entry;
  entry.rank = rank;
  entry.begin = begin;
  entry.end = end;
  entry.file = shard_file_name(rank);
  const std::string path = (fs::path(step_dir) / entry.file).string();
  ALLOY_CHECK(shared.parameters.empty(), "sharded checkpoint ", path,
              ": the shared state holds parameters (they go into the flat ranges)");

  std::vector<std::string_view> parts(1);  // the header, filled in last
  std::uint64_t offset = kHeaderBytes;
  std::uint32_t crc = 0;
  for (const FlatRange& range : ranges) {
    check_name(range.kind, "kind");
    const std::size_t element = dtype_size(range.dtype);
    ALLOY_CHECK(range.data.size() == static_cast<std::size_t>(end - begin) * element,
                "sharded checkpoint ", path, ": kind ", range.kind, " holds ", range.data.size(),
                " bytes, not the ", end - begin, " ", dtype_name(range.dtype), " elements of [",
                begin, ", ", end, ")");
    const std::string_view bytes = as_text(range.data);
    entry.sections.push_back(
        {range.kind, offset,
         chunk_crcs(bytes, static_cast<std::size_t>(chunk_elements) * element)});
    parts.push_back(bytes);
    crc = crc32_of(bytes, crc);
    offset += bytes.size();
  }
  const std::string state = serialize_state(shared);
  entry.state_offset = offset;
  entry.state_bytes = state.size();
  entry.state_crc = crc32_of(state);
  parts.push_back(state);
  crc = crc32_of(state, crc);
  entry.bytes = offset + state.size();
  entry.crc = crc;
  const std::string header = encode_header(entry.bytes - kHeaderBytes, crc);
  parts[0] = header;

  std::error_code error;
  fs::create_directories(step_dir, error);
  if (error) fail("cannot create checkpoint directory ", step_dir, ": ", error.message());
  write_file_atomically(path, parts);
  return entry;
}

std::string encode_shard_entry(const ShardEntry& entry) {
  std::ostringstream out;
  append_entry(out, entry);
  return out.str();
}

ShardEntry decode_shard_entry(const std::string& text) {
  LineParser parser(text, "shard entry");
  std::vector<ShardEntry> shards;
  parse_lines(parser, shards, nullptr);
  if (shards.size() != 1) parser.corrupt(shards.size(), " shard lines, not 1");
  return std::move(shards[0]);
}

void check_manifest(const Manifest& m, const std::string& name) {
  const auto bad = [&](auto&&... parts) { fail_file(name, "corrupt manifest: ", parts...); };
  // Far beyond any model, and small enough that no size or offset computed below overflows.
  constexpr std::int64_t kMaxElements = std::int64_t{1} << 48;
  if (m.step < 0 || m.world_size < 1 || m.total < 0 || m.total > kMaxElements ||
      m.chunk_elements < 1 || m.world_size > kMaxElements) {
    bad("step ", m.step, ", world size ", m.world_size, ", ", m.total, " elements, chunks of ",
        m.chunk_elements);
  }
  if (static_cast<std::int64_t>(m.shards.size()) != m.world_size) {
    bad(m.shards.size(), " shards for world size ", m.world_size);
  }
  // Weights and an optimizer's few states: a handful.
  constexpr std::size_t kMaxKinds = 64;
  if (m.kinds.size() > kMaxKinds) bad(m.kinds.size(), " kinds");
  std::set<std::string> names;
  for (const FlatKind& kind : m.kinds) {
    if (!names.insert(kind.name).second) bad("kind ", kind.name, " appears twice");
  }
  names.clear();
  std::int64_t offset = 0;
  for (const FlatParameter& p : m.parameters) {
    if (!names.insert(p.name).second) bad("parameter ", p.name, " appears twice");
    std::int64_t numel = 1;
    for (const std::int64_t extent : p.shape) {
      if (extent < 0 || (extent > 0 && numel > kMaxElements / extent)) {
        bad("parameter ", p.name, " has an impossible shape");
      }
      numel *= extent;
    }
    if (p.offset != offset || p.numel != numel || p.numel > m.total) {
      bad("parameter ", p.name, shape_str(p.shape), " at offset ", p.offset, " with ", p.numel,
          " elements; the table's next offset is ", offset);
    }
    offset += p.numel;
    if (offset > m.total) bad("the parameters hold more than ", m.total, " elements");
  }
  if (offset != m.total) bad("the parameters hold ", offset, " elements, not ", m.total);
  std::int64_t begin = 0;
  for (std::size_t r = 0; r < m.shards.size(); ++r) {
    const ShardEntry& s = m.shards[r];
    if (s.rank != static_cast<std::int64_t>(r) || s.file != shard_file_name(s.rank)) {
      bad("shard ", r, " is rank ", s.rank, " in ", s.file);
    }
    if (s.begin != begin || s.end < s.begin || s.end > m.total) {
      bad("shard ", r, " holds [", s.begin, ", ", s.end, "), the shards before it end at ", begin);
    }
    begin = s.end;
    if (s.sections.size() != m.kinds.size()) {
      bad("shard ", r, " has ", s.sections.size(), " sections for ", m.kinds.size(), " kinds");
    }
    const std::int64_t elements = s.end - s.begin;
    std::uint64_t at = kHeaderBytes;
    for (std::size_t k = 0; k < m.kinds.size(); ++k) {
      const ShardSection& section = s.sections[k];
      if (section.kind != m.kinds[k].name || section.offset != at ||
          static_cast<std::int64_t>(section.crcs.size()) !=
              chunk_count(elements, m.chunk_elements)) {
        bad("shard ", r, "'s section ", k, " is ", section.kind, " at byte ", section.offset,
            " with ", section.crcs.size(), " chunk CRCs; expected ", m.kinds[k].name, " at byte ",
            at, " with ", chunk_count(elements, m.chunk_elements));
      }
      at += static_cast<std::uint64_t>(elements) * dtype_size(m.kinds[k].dtype);
    }
    if (s.state_offset != at || s.bytes != at + s.state_bytes) {
      bad("shard ", r, "'s shared state at byte ", s.state_offset, " (", s.state_bytes,
          " bytes) in a file of ", s.bytes, " bytes; its ranges end at byte ", at);
    }
  }
  if (begin != m.total) bad("the shards end at ", begin, ", not at ", m.total);
}

void write_manifest(const std::string& step_dir, const Manifest& m) {
  const std::string path = (fs::path(step_dir) / kManifestName).string();
  check_manifest(m, path);
  std::ostringstream out;
  out << kManifestTitle << ' ' << kManifestVersion << '\n'
      << "step " << m.step << '\n'
      << "world_size " << m.world_size << '\n'
      << "total " << m.total << '\n'
      << "chunk_elements " << m.chunk_elements << '\n';
  for (const FlatKind& kind : m.kinds) {
    check_name(kind.name, "kind");
    out << "kind " << kind.name << ' ' << dtype_name(kind.dtype) << '\n';
  }
  for (const FlatParameter& p : m.parameters) {
    check_name(p.name, "parameter");
    out << "parameter " << p.name << ' ' << dtype_name(p.dtype) << ' ' << shape_text(p.shape) << ' '
        << p.offset << ' ' << p.numel << '\n';
  }
  for (const ShardEntry& entry : m.shards)
    append_entry(out, entry);
  const std::string body = out.str();
  const std::string tail = "crc " + hex32(crc32_of(body)) + "\n";
  write_file_atomically(path, {body, tail});
}

std::string step_dir_of(const std::string& path) {
  const fs::path p(path);
  if (p.filename() == kManifestName) {
    const std::string parent = p.parent_path().string();
    return parent.empty() ? "." : parent;
  }
  return path;
}

bool is_sharded_checkpoint(const std::string& path) {
  std::error_code error;
  if (fs::path(path).filename() == kManifestName) return fs::is_regular_file(path, error);
  return fs::is_directory(path, error) && fs::exists(fs::path(path) / kManifestName, error);
}

Manifest read_manifest(const std::string& step_dir_or_manifest) {
  const std::string path = (fs::path(step_dir_of(step_dir_or_manifest)) / kManifestName).string();
  std::uint64_t size = 0;
  const FileDescriptor file =
      open_checkpoint_file(path, "no manifest (an incomplete sharded save is no checkpoint)", size);
  // A manifest is text of a few lines a parameter and a shard; one far beyond that is no manifest.
  constexpr std::uint64_t kMaxManifestBytes = std::uint64_t{1} << 30;
  if (size == 0) fail_file(path, "empty manifest");
  if (size > kMaxManifestBytes) fail_file(path, "corrupt manifest: ", size, " bytes");
  std::string text(size, '\0');
  text.resize(file.read_up_to(text.data(), text.size()));

  // The last line is "crc XXXXXXXX", over everything before it.
  const std::size_t last = text.size() >= 2 ? text.rfind('\n', text.size() - 2) : std::string::npos;
  const std::string_view tail =
      last == std::string::npos ? std::string_view() : std::string_view(text).substr(last + 1);
  if (tail.size() != 13 || tail.substr(0, 4) != "crc " || tail.back() != '\n') {
    fail_file(path, "truncated manifest: it does not end in its CRC line");
  }
  const std::string_view body = std::string_view(text).substr(0, last + 1);
  LineParser parser(body, path);
  if (parser.crc(tail.substr(4, 8)) != crc32_of(body)) {
    fail_file(path, "corrupt manifest: CRC mismatch");
  }

  Manifest m;
  bool titled = false;
  parse_lines(parser, m.shards, [&](const std::vector<std::string_view>& f) {
    if (f[0] == kManifestTitle) {
      parser.expect(f, 2);
      const int version = parser.integer<int>(f[1]);
      if (version > kManifestVersion) {
        fail_file(path, "written by a newer Alloy: manifest version ", version,
                  ", this build reads up to ", kManifestVersion);
      }
      titled = true;
    } else if (!titled) {
      parser.corrupt("not an Alloy sharded checkpoint manifest");
    } else if (f[0] == "step" || f[0] == "world_size" || f[0] == "total" ||
               f[0] == "chunk_elements") {
      parser.expect(f, 2);
      const std::int64_t value = parser.count(f[1]);
      (f[0] == "step"         ? m.step
       : f[0] == "world_size" ? m.world_size
       : f[0] == "total"      ? m.total
                              : m.chunk_elements) = value;
    } else if (f[0] == "kind") {
      parser.expect(f, 3);
      m.kinds.push_back({std::string(f[1]), parser.dtype(f[2])});
    } else if (f[0] == "parameter") {
      parser.expect(f, 6);
      m.parameters.push_back({std::string(f[1]), parser.shape(f[3]), parser.dtype(f[2]),
                              parser.count(f[4]), parser.count(f[5])});
    } else {
      parser.corrupt("unexpected '", f[0], "'");
    }
  });
  if (!titled) parser.corrupt("not an Alloy sharded checkpoint manifest");
  check_manifest(m, path);
  return m;
}

std::vector<unsigned char> read_flat_range(const Manifest& m, const std::string& step_dir,
                                           const std::string& kind, std::int64_t begin,
                                           std::int64_t end) {
  const std::string manifest = (fs::path(step_dir) / kManifestName).string();
  const std::size_t k = kind_index(m, kind, manifest);
  ALLOY_CHECK(0 <= begin && begin <= end && end <= m.total, "checkpoint ", manifest, ": range [",
              begin, ", ", end, ") is outside its ", m.total, " elements");
  const std::size_t element = dtype_size(m.kinds[k].dtype);
  std::vector<unsigned char> out(static_cast<std::size_t>(end - begin) * element);
  for (const ShardEntry& shard : m.shards) {
    const std::int64_t from = std::max(begin, shard.begin);
    const std::int64_t to = std::min(end, shard.end);
    if (from >= to) continue;
    // Whole chunks around [from, to), each checked against its CRC.
    const std::int64_t first = (from - shard.begin) / m.chunk_elements;
    const std::int64_t last = chunk_count(to - shard.begin, m.chunk_elements);
    const std::int64_t chunk_begin = first * m.chunk_elements;
    const std::int64_t chunk_end = std::min(last * m.chunk_elements, shard.end - shard.begin);
    std::string path;
    const FileDescriptor file = open_shard(shard, step_dir, path);
    const ShardSection& section = shard.sections[k];
    const std::vector<unsigned char> bytes =
        read_exactly(file, section.offset + static_cast<std::uint64_t>(chunk_begin) * element,
                     static_cast<std::uint64_t>(chunk_end - chunk_begin) * element);
    const std::size_t chunk_bytes = static_cast<std::size_t>(m.chunk_elements) * element;
    for (std::int64_t c = first; c < last; ++c) {
      const std::size_t at = static_cast<std::size_t>(c - first) * chunk_bytes;
      if (crc32_of(as_text(bytes, at, chunk_bytes)) != section.crcs[static_cast<std::size_t>(c)]) {
        fail_file(path, "corrupt: CRC mismatch in ", kind, " chunk ", c, " (elements ",
                  shard.begin + c * m.chunk_elements, " onwards)");
      }
    }
    std::memcpy(out.data() + static_cast<std::size_t>(from - begin) * element,
                bytes.data() + static_cast<std::size_t>(from - shard.begin - chunk_begin) * element,
                static_cast<std::size_t>(to - from) * element);
  }
  return out;
}

CheckpointState read_shared_state(const Manifest& m, const std::string& step_dir) {
  std::string path;
  const FileDescriptor file = open_shard(m.shards.at(0), step_dir, path);
  CheckpointState state = shared_state_of(file, m.shards[0]);
  ALLOY_CHECK(state.step == m.step, "checkpoint ", path, ": corrupt: its state is at step ",
              state.step, ", the manifest's at ", m.step);
  return state;
}

CheckpointState gather_sharded_state(const Manifest& m, const std::string& step_dir) {
  CheckpointState state = read_shared_state(m, step_dir);
  std::vector<NamedTensor> flat_state;
  for (std::size_t k = 0; k < m.kinds.size(); ++k) {
    const FlatKind& kind = m.kinds[k];
    const std::vector<unsigned char> all = read_flat_range(m, step_dir, kind.name, 0, m.total);
    const std::size_t element = dtype_size(kind.dtype);
    for (const FlatParameter& p : m.parameters) {
      NamedTensor tensor;
      tensor.name = kind.name == kParamKind ? p.name : p.name + "." + kind.name;
      tensor.dtype = kind.dtype;
      tensor.shape = p.shape;
      const auto first = all.begin() + static_cast<std::ptrdiff_t>(p.offset) *
                                           static_cast<std::ptrdiff_t>(element);
      tensor.data.assign(first, first + static_cast<std::ptrdiff_t>(p.numel) *
                                            static_cast<std::ptrdiff_t>(element));
      (kind.name == kParamKind ? state.parameters : flat_state).push_back(std::move(tensor));
    }
  }
  // Parameter by parameter, each one's kinds together (the optimizers' own order), then the
  // state that was not flat (weight averages).
  std::vector<NamedTensor> optimizer_state;
  const std::size_t kinds = m.parameters.empty() ? 0 : flat_state.size() / m.parameters.size();
  for (std::size_t p = 0; p < m.parameters.size(); ++p) {
    for (std::size_t k = 0; k < kinds; ++k)
      optimizer_state.push_back(std::move(flat_state[k * m.parameters.size() + p]));
  }
  for (NamedTensor& tensor : state.optimizer_state) {
    ALLOY_CHECK(find_tensor(optimizer_state, tensor.name) == nullptr, "checkpoint ", step_dir,
                ": corrupt: ", tensor.name, " is both flat and shared");
    optimizer_state.push_back(std::move(tensor));
  }
  state.optimizer_state = std::move(optimizer_state);
  return state;
}

std::vector<unsigned char> flat_range_of_state(const CheckpointState& state,
                                               const std::vector<FlatParameter>& parameters,
                                               const std::string& kind, std::int64_t begin,
                                               std::int64_t end) {
  ALLOY_CHECK(0 <= begin && begin <= end, "flat range [", begin, ", ", end, ") is not a range");
  std::vector<unsigned char> out;
  std::size_t element = 0;
  std::int64_t covered = begin;
  for (const FlatParameter& p : parameters) {
    const std::int64_t from = std::max(begin, p.offset);
    const std::int64_t to = std::min(end, p.offset + p.numel);
    if (from >= to) continue;
    const std::string name = kind == kParamKind ? p.name : p.name + "." + kind;
    const NamedTensor* tensor =
        find_tensor(kind == kParamKind ? state.parameters : state.optimizer_state, name);
    ALLOY_CHECK(tensor != nullptr, "checkpoint holds no ", name);
    ALLOY_CHECK(
        tensor->numel() == p.numel && (element == 0 || dtype_size(tensor->dtype) == element),
        "checkpoint tensor ", name, " is ", dtype_name(tensor->dtype), shape_str(tensor->shape),
        ", not ", shape_str(p.shape));
    element = dtype_size(tensor->dtype);
    if (out.empty()) out.reserve(static_cast<std::size_t>(end - begin) * element);
    const auto first =
        tensor->data.begin() +
        static_cast<std::ptrdiff_t>((from - p.offset) * static_cast<std::int64_t>(element));
    out.insert(
        out.end(), first,
        first + static_cast<std::ptrdiff_t>((to - from) * static_cast<std::int64_t>(element)));
    covered = to;
  }
  ALLOY_CHECK(covered == end, "flat range [", begin, ", ", end,
              ") reaches beyond the parameters, which end at ", covered);
  return out;
}

void check_shard_files(const Manifest& m, const std::string& step_dir) {
  for (const ShardEntry& shard : m.shards) {
    std::string path;
    open_shard(shard, step_dir, path);
  }
}

void verify_sharded_checkpoint(const Manifest& m, const std::string& step_dir) {
  for (const ShardEntry& shard : m.shards) {
    std::string path;
    const FileDescriptor file = open_shard(shard, step_dir, path);
    const std::vector<unsigned char> bytes = read_exactly(file, 0, shard.bytes);
    const CheckpointHeader header =
        check_header(as_text(bytes, 0, kHeaderBytes), bytes.size(), path);
    if (crc32_of(as_text(bytes, kHeaderBytes)) != header.payload_crc) {
      fail_file(path, "corrupt: CRC mismatch");
    }
    if (header.payload_crc != shard.crc) {
      fail_file(path, "CRC-32 ", hex32(header.payload_crc), " is not the manifest's ",
                hex32(shard.crc), " (a shard of another save?)");
    }
    for (std::size_t k = 0; k < m.kinds.size(); ++k) {
      const std::size_t element = dtype_size(m.kinds[k].dtype);
      const ShardSection& section = shard.sections[k];
      const std::string_view range = as_text(
          bytes, section.offset, static_cast<std::size_t>(shard.end - shard.begin) * element);
      if (chunk_crcs(range, static_cast<std::size_t>(m.chunk_elements) * element) != section.crcs) {
        fail_file(path, "corrupt: the chunk CRCs of ", section.kind, " differ from the manifest's");
      }
    }
    const CheckpointState state = shared_state_of(file, shard);
    ALLOY_CHECK(state.step == m.step, "checkpoint ", path, ": its state is at step ", state.step,
                ", the manifest's at ", m.step);
  }
}

}  // namespace alloy::checkpoint
