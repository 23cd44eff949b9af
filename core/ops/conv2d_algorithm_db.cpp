#include "core/ops/conv2d_algorithm_db.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace alloy::cuda {

namespace {

constexpr const char* kHeader =
    "# Alloy's measured cuDNN convolution algorithms (docs/cuda.md), one per line, tab-separated:\n"
    "# gpu, cudnn version, dtype, x N,C,H,W, filter K,C,R,S, stride, padding, layout, direction,\n"
    "# algorithm, math type. Delete the file to measure again.\n";
constexpr int kKeyFields = 9;
constexpr const char* kDirections[] = {"forward", "data", "filter"};
// The dtype field of f32 data allowed TF32 (ConvAlgorithmKey::tf32).
constexpr const char* kTf32 = "tf32";

void warn(const std::string& message) {
  std::cerr << "alloy: warning: " << message << std::endl;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string::size_type begin = 0;
  for (;;) {
    const std::string::size_type end = text.find(separator, begin);
    parts.push_back(text.substr(begin, end - begin));
    if (end == std::string::npos) return parts;
    begin = end + 1;
  }
}

// A decimal integer in [minimum, maximum] that is the whole of `text`.
std::optional<long> integer(const std::string& text, long minimum, long maximum) {
  if (text.empty() || text.size() > 12) return std::nullopt;
  for (const char c : text)
    if (c < '0' || c > '9') return std::nullopt;
  const long value = std::stol(text);
  if (value < minimum || value > maximum) return std::nullopt;
  return value;
}

// "a,b,..." with `count` integers of at least `minimum`.
std::optional<std::vector<int>> integers(const std::string& text, std::size_t count, long minimum) {
  const std::vector<std::string> parts = split(text, ',');
  if (parts.size() != count) return std::nullopt;
  std::vector<int> values;
  for (const std::string& part : parts) {
    const std::optional<long> value = integer(part, minimum, 1L << 30);
    if (!value) return std::nullopt;
    values.push_back(static_cast<int>(*value));
  }
  return values;
}

// The line's choice, or why it is not one.
std::string parse_line(const std::string& line, std::string& key, ConvAlgorithm& choice) {
  const std::vector<std::string> fields = split(line, '\t');
  if (fields.size() != kKeyFields + 2)
    return detail::concat(fields.size(), " tab-separated fields, not ", kKeyFields + 2);
  ConvAlgorithmKey k;
  k.gpu = fields[0];
  if (k.gpu.empty()) return "no GPU name";
  const std::optional<long> version = integer(fields[1], 0, 1L << 40);
  if (!version) return "cuDNN version '" + fields[1] + "' is not a number";
  k.cudnn_version = *version;
  k.tf32 = fields[2] == kTf32;
  try {
    k.dtype = k.tf32 ? DType::f32 : parse_dtype(fields[2]);
  } catch (const Error&) {
    return "unknown dtype '" + fields[2] + "'";
  }
  const auto x = integers(fields[3], 4, 1), w = integers(fields[4], 4, 1);
  const auto stride = integers(fields[5], 2, 1), padding = integers(fields[6], 2, 0);
  if (!x || !w || !stride || !padding)
    return "the shapes '" + fields[3] + "', '" + fields[4] + "', '" + fields[5] + "', '" +
           fields[6] + "' are not N,C,H,W, K,C,R,S, stride H,W and padding H,W";
  if ((*x)[1] != (*w)[1]) return "x and filter channels differ";
  k.geometry = {(*x)[0], (*x)[1],
                (*x)[2], (*x)[3],
                (*w)[0], (*w)[2],
                (*w)[3], 0,
                0,       {(*stride)[0], (*stride)[1], (*padding)[0], (*padding)[1]}};
  if (fields[7] != "nchw" && fields[7] != "nhwc")
    return "layout '" + fields[7] + "' is not nchw or nhwc";
  k.geometry.layout = fields[7] == "nhwc" ? Layout::nhwc : Layout::nchw;
  k.direction = fields[8];
  bool known = false;
  for (const char* direction : kDirections)
    known = known || k.direction == direction;
  if (!known) return "direction '" + k.direction + "' is not forward, data or filter";
  const std::optional<long> algo = integer(fields[9], 0, 1000), math = integer(fields[10], 0, 1000);
  if (!algo || !math) return "algorithm and math type are not small numbers";
  key = conv_algorithm_key_text(k);
  choice = {static_cast<int>(*algo), static_cast<int>(*math)};
  return {};
}

// The process's setting and table.
struct State {
  std::mutex mutex;
  ConvAlgorithmChoice choice = ConvAlgorithmChoice::heuristic;
  ConvAlgorithmTable checkpoint;  // loaded on --resume: wins over the db
  ConvAlgorithmTable db;          // read at the first lookup
  bool db_read = false;
  ConvAlgorithmTable in_use;  // what a checkpoint saves
  bool profiler_noted = false;
};

State& state() {
  static State s;
  return s;
}

}  // namespace

std::string conv_algorithm_key_text(const ConvAlgorithmKey& key) {
  std::string gpu = key.gpu;
  for (char& c : gpu)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  const cpu::Conv2dGeometry& g = key.geometry;
  const char* dtype = key.tf32 && key.dtype == DType::f32 ? kTf32 : dtype_name(key.dtype);
  return detail::concat(gpu, '\t', key.cudnn_version, '\t', dtype, '\t', g.batch, ',', g.channels,
                        ',', g.height, ',', g.width, '\t', g.filters, ',', g.channels, ',',
                        g.kernel_h, ',', g.kernel_w, '\t', g.params.stride_h, ',',
                        g.params.stride_w, '\t', g.params.pad_h, ',', g.params.pad_w, '\t',
                        layout_name(g.layout), '\t', key.direction);
}

std::string format_conv_algorithms(const ConvAlgorithmTable& table) {
  std::string text;
  for (const auto& [key, choice] : table)
    text += detail::concat(key, '\t', choice.algo, '\t', choice.math_type, '\n');
  return text;
}

ConvAlgorithmTable parse_conv_algorithms(const std::string& text, std::string* problem) {
  ConvAlgorithmTable table;
  const std::vector<std::string> lines = split(text, '\n');
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.empty() || line[0] == '#') continue;
    std::string key;
    ConvAlgorithm choice;
    const std::string why = parse_line(line, key, choice);
    if (why.empty()) {
      table[key] = choice;
      continue;
    }
    const std::string message = detail::concat("line ", i + 1, ": ", why);
    if (problem == nullptr) fail(message);
    if (problem->empty()) *problem = message;
  }
  return table;
}

std::string conv_algorithm_db_path() {
  namespace fs = std::filesystem;
  fs::path directory;
  if (const char* cache = std::getenv("ALLOY_CACHE_DIR"); cache != nullptr && *cache != '\0') {
    directory = cache;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    directory = fs::path(xdg) / "alloy";
  } else {
    const char* home = std::getenv("HOME");
    directory = fs::path(home != nullptr && *home != '\0' ? home : ".") / ".cache" / "alloy";
  }
  return (directory / "conv_algorithms.txt").string();
}

ConvAlgorithmTable read_conv_algorithm_db(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return {};
  std::ifstream file(path, std::ios::binary);
  std::string text;
  bool read = file.is_open();
  try {
    if (read) text.assign(std::istreambuf_iterator<char>(file), {});
  } catch (const std::ios_base::failure&) {
    read = false;  // a directory, an I/O error
  }
  if (!read || file.bad()) {
    warn(detail::concat("cannot read the convolution algorithm db ", path,
                        "; measuring again and rewriting it"));
    return {};
  }
  std::string problem;
  ConvAlgorithmTable table = parse_conv_algorithms(text, &problem);
  if (!problem.empty()) {
    warn(detail::concat("the convolution algorithm db ", path, " is corrupt (", problem,
                        "); its other ", table.size(),
                        " lines are kept and the file is rewritten at the next measurement"));
  }
  return table;
}

ConvAlgorithmTable merge_into_conv_algorithm_db(const std::string& path,
                                                const ConvAlgorithmTable& choices) {
  namespace fs = std::filesystem;
  const auto failed = [&](const std::string& what) {
    warn(detail::concat("cannot update the convolution algorithm db ", path, " (", what,
                        "); the choices stay in memory for this run"));
    return choices;
  };
  std::error_code error;
  const fs::path directory = fs::path(path).parent_path();
  if (!directory.empty()) fs::create_directories(directory, error);
  if (error) return failed("creating " + directory.string() + ": " + error.message());
  const std::string lock_path = path + ".lock";
  const int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) return failed("opening " + lock_path + ": " + std::strerror(errno));
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }  // closing releases the flock
  } unlock{lock};
  while (::flock(lock, LOCK_EX) != 0) {
    if (errno != EINTR) return failed("locking " + lock_path + ": " + std::strerror(errno));
  }
  ConvAlgorithmTable merged = read_conv_algorithm_db(path);
  for (const auto& [key, choice] : choices)
    merged.emplace(key, choice);
  const std::string temporary = detail::concat(path, ".tmp.", ::getpid());
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file << kHeader << format_conv_algorithms(merged);
    file.flush();
    if (!file) {
      fs::remove(temporary, error);
      return failed("writing " + temporary);
    }
  }
  fs::rename(temporary, path, error);
  if (error) {
    fs::remove(temporary, error);
    return failed("renaming " + temporary + ": " + error.message());
  }
  return merged;
}

void set_conv_algorithm_choice(ConvAlgorithmChoice choice) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().choice = choice;
}

ConvAlgorithmChoice conv_algorithm_choice() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().choice;
}

void load_conv_algorithms(const std::string& text, const std::string& source) {
  ConvAlgorithmTable table;
  try {
    table = parse_conv_algorithms(text);
  } catch (const Error& error) {
    fail(source, ": its conv_algorithms do not parse (", error.what(), ")");
  }
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (const auto& [key, choice] : table) {
    s.checkpoint[key] = choice;
    s.in_use[key] = choice;
  }
}

std::optional<ConvAlgorithm> known_conv_algorithm(const ConvAlgorithmKey& key) {
  const std::string text = conv_algorithm_key_text(key);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto found = s.checkpoint.find(text);
  if (found == s.checkpoint.end()) {
    if (!s.db_read) {
      // Choices this process recorded before its first lookup stay (one under a profiler is in
      // no file); the file adds the rest.
      s.db.merge(read_conv_algorithm_db(conv_algorithm_db_path()));
      s.db_read = true;
    }
    found = s.db.find(text);
    if (found == s.db.end()) return std::nullopt;
  }
  s.in_use[text] = found->second;
  return found->second;
}

bool cuda_profiler_attached() {
  const char* injection = std::getenv("CUDA_INJECTION64_PATH");
  return injection != nullptr && *injection != '\0';
}

ConvAlgorithm record_conv_algorithm(const ConvAlgorithmKey& key, ConvAlgorithm choice) {
  const std::string text = conv_algorithm_key_text(key);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (cuda_profiler_attached()) {
    // Nsight Compute replays and serializes kernels, so the timings behind `choice` are not
    // this GPU's: saved, they would slow every later run (a profiled LeNet run once saved an
    // algorithm that made the next runs 2.5x slower).
    if (!s.profiler_noted) {
      std::cerr << "alloy: note: a CUDA profiler is attached (CUDA_INJECTION64_PATH is set): "
                   "this run's measured convolution algorithms are not saved to "
                << conv_algorithm_db_path() << std::endl;
      s.profiler_noted = true;
    }
  } else {
    const ConvAlgorithmTable db =
        merge_into_conv_algorithm_db(conv_algorithm_db_path(), {{text, choice}});
    const auto written = db.find(text);
    if (written != db.end()) choice = written->second;
  }
  s.db[text] = choice;
  s.in_use[text] = choice;
  return choice;
}

std::string conv_algorithms_in_use() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return format_conv_algorithms(state().in_use);
}

void reset_conv_algorithms() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.checkpoint.clear();
  s.db.clear();
  s.db_read = false;
  s.in_use.clear();
}

}  // namespace alloy::cuda
