/// \file
/// Reading and writing the gzip-compressed data sets of the cost-model benchmarks: through zlib
/// where CMake found it (LOOM_BENCH_HAVE_ZLIB, target loom_bench_cost_io), else through a `gzip`
/// child process.
#ifndef LOOM_BENCH_COST_GZ_IO_HPP
#define LOOM_BENCH_COST_GZ_IO_HPP

#if defined(LOOM_BENCH_HAVE_ZLIB)
#include <zlib.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <string>

namespace loom_bench {

/// The whole decompressed file (empty when it cannot be read).
inline std::string read_gz(const std::string& path) {
  std::string text;
  char buf[1 << 16];
#if defined(LOOM_BENCH_HAVE_ZLIB)
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return text;
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  gzclose(f);
#else
  FILE* f = popen(("gzip -dc '" + path + "'").c_str(), "r");
  if (!f) return text;
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  pclose(f);
#endif
  return text;
}

/// Writes the data set gzip-compressed: through zlib where it was found, else through a `gzip`
/// child process.
class GzWriter {
 public:
  explicit GzWriter(const std::string& path) {
#if defined(LOOM_BENCH_HAVE_ZLIB)
    file_ = gzopen(path.c_str(), "wb9");
#else
    const std::string command = "gzip -9 -n > '" + path + "'";
    file_ = popen(command.c_str(), "w");
#endif
    if (!file_) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      std::exit(1);
    }
  }
  GzWriter(const GzWriter&) = delete;
  GzWriter& operator=(const GzWriter&) = delete;
  ~GzWriter() {
#if defined(LOOM_BENCH_HAVE_ZLIB)
    gzclose(file_);
#else
    pclose(file_);
#endif
  }
  void write(const std::string& line) {
#if defined(LOOM_BENCH_HAVE_ZLIB)
    gzwrite(file_, line.data(), static_cast<unsigned>(line.size()));
#else
    std::fwrite(line.data(), 1, line.size(), file_);
#endif
  }

 private:
#if defined(LOOM_BENCH_HAVE_ZLIB)
  gzFile file_ = nullptr;
#else
  FILE* file_ = nullptr;
#endif
};

}  // namespace loom_bench

#endif  // LOOM_BENCH_COST_GZ_IO_HPP
