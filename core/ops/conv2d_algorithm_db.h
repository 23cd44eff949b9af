// Which cuDNN algorithm conv2d runs per convolution direction when it measures them
// (--conv-algorithms measured), kept so that runs stay bit-reproducible: two algorithms that time
// within noise of each other could otherwise be picked differently by two runs, and different
// algorithms round differently. Pure host code (no CUDA header), so the CPU tests check it; it
// sits beside the dispatchers, not in core/ops/cuda/, because the command's sources include it
// and a CPU-only installation leaves the CUDA headers out.
//
// A choice is one line of text, tab-separated:
//   GPU name, cuDNN version, dtype ("tf32": f32 data allowed TF32), x "N,C,H,W", filter "K,C,R,S",
//   stride "H,W", padding "H,W", layout ("nchw" or "nhwc"), direction (forward | data | filter),
//   algorithm, math type
// (the last two: cudnnConvolution*Algo_t and cudnnMathType_t as integers). The same lines make
// the algorithm db, $ALLOY_CACHE_DIR/conv_algorithms.txt (default $XDG_CACHE_HOME/alloy, else
// ~/.cache/alloy), and a checkpoint's extra["conv_algorithms"].
//
// The process holds one table of choices (the setting below): those a resumed checkpoint
// carried win over the db's, the db's over measuring again; a measured choice is added to the
// table and merged into the db at once.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/ops/conv2d.h"

namespace alloy::cuda {

// --conv-algorithms: cuDNN's heuristic ranking (the first candidate that runs), or the fastest
// deterministic candidate by cudnnFind*AlgorithmEx, kept in the table and the db.
enum class ConvAlgorithmChoice { heuristic, measured };

// One direction of one convolution on one GPU and cuDNN: the key of a choice.
struct ConvAlgorithmKey {
  std::string gpu;  // cudaDeviceProp::name (tabs and line breaks become spaces)
  long cudnn_version = 0;
  DType dtype = DType::f32;
  cpu::Conv2dGeometry geometry;
  std::string direction;  // forward | data | filter
  // f32 data with --allow-tf32: cuDNN's tensor-op algorithms compete too, so the choice is
  // another one than plain f32's.
  bool tf32 = false;
};

struct ConvAlgorithm {
  int algo = 0;
  int math_type = 0;
  bool operator==(const ConvAlgorithm& other) const {
    return algo == other.algo && math_type == other.math_type;
  }
};

// Choices by their key's text (the line's first nine fields).
using ConvAlgorithmTable = std::map<std::string, ConvAlgorithm>;

std::string conv_algorithm_key_text(const ConvAlgorithmKey& key);

// The lines of `table`, sorted by key, each ending in '\n'.
std::string format_conv_algorithms(const ConvAlgorithmTable& table);

// The choices in `text`; lines starting with '#' and empty lines are skipped. A line that does
// not parse is left out and, when `problem` is given, the first such is described there
// ("line 3: ..."); without `problem` it throws Error.
ConvAlgorithmTable parse_conv_algorithms(const std::string& text, std::string* problem = nullptr);

// $ALLOY_CACHE_DIR/conv_algorithms.txt, else $XDG_CACHE_HOME/alloy/..., else ~/.cache/alloy/...
std::string conv_algorithm_db_path();

// The db at `path`: empty when there is none. An unreadable or partly corrupt file gives a
// warning on stderr naming the file and what is wrong, and what parsed (possibly nothing).
ConvAlgorithmTable read_conv_algorithm_db(const std::string& path);

// Merges `choices` into the db at `path` (its directory created as needed): under an exclusive
// lock on "PATH.lock", re-reads the file, adds the keys it lacks (a key already there keeps its
// choice: another process measured it first), writes a temporary file and renames it over the
// db, so concurrent writers lose nothing and a reader never sees half a file. Corrupt lines are
// dropped by the rewrite. Returns the db as written. Failures (a read-only cache, ...) are
// warnings on stderr, and return `choices`: the run goes on with its choices in memory.
ConvAlgorithmTable merge_into_conv_algorithm_db(const std::string& path,
                                                const ConvAlgorithmTable& choices);

// The process-wide setting, set before training (apps/train/trainer.cpp); heuristic until then, so
// that ops used outside `alloy train` never touch the db.
void set_conv_algorithm_choice(ConvAlgorithmChoice choice);
ConvAlgorithmChoice conv_algorithm_choice();

// Loads a checkpoint's choices (its extra["conv_algorithms"]) into the process's table, where
// they win over the db's. Throws Error naming `source` when the text does not parse.
void load_conv_algorithms(const std::string& text, const std::string& source);

// The choice for `key`: the checkpoint's, else the db's (read once per process, at the first
// lookup), else none.
std::optional<ConvAlgorithm> known_conv_algorithm(const ConvAlgorithmKey& key);

// Records a choice the process measured: merged at once into the db, and in the table. Returns
// the db's choice for `key`: another process's (a rank beside this one that measured the same
// convolution first) where it won the race, so that the ranks of a node agree. Under a CUDA
// profiler (CUDA_INJECTION64_PATH set, as Nsight Compute and Nsight Systems do) the choice goes
// in the table only: timings taken under it are not the GPU's own, and the db outlives the run.
ConvAlgorithm record_conv_algorithm(const ConvAlgorithmKey& key, ConvAlgorithm choice);

// The choices this process used or loaded from a checkpoint, as lines: what a checkpoint saves.
std::string conv_algorithms_in_use();

// Forgets the table and the db read (tests: a fresh process's state).
void reset_conv_algorithms();

}  // namespace alloy::cuda
