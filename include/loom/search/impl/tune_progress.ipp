// What a tuning run (search/impl/tuner.ipp) tells the user: a line when it resumes, a line per
// round, a summary. Quiet runs (TuneOptions::quiet) print nothing; warnings go the same way.
#include "loom/detail/clock.hpp"
#include "loom/search/tuner.hpp"

#include <cstdio>
#include <iostream>
#include <string>

LOOM_BEGIN_NAMESPACE
namespace search {
namespace detail {

class TuneProgress {
 public:
  TuneProgress(const TuneOptions& options, std::string name)
      : options_(options), log_(options.log ? *options.log : std::cerr), name_(std::move(name)) {}

  void not_replayed(const loom::error& e) const {
    if (options_.quiet) return;
    log_ << "loom: warning: " << options_.records << ": a record of " << name_
         << " does not replay on this DAG and is ignored: " << e.what() << "\n";
  }

  void resumed(size_t records, const TuneReport& report) const {
    if (options_.quiet) return;
    log_ << "[loom] " << name_ << ": resumed " << records << " records from " << options_.records
         << ", best " << (report.best ? std::to_string(report.best_gflops()) + " GFLOP/s" : "none")
         << "\n";
  }

  void carried(size_t programs, int threads, const std::string& device, bool cold) const {
    if (options_.quiet) return;
    log_ << "[loom] " << name_ << ": " << programs << " programs of records measured with "
         << "another thread count, on another device or with warm/cold weights are measured "
         << "first with " << threads << " threads" << (device.empty() ? "" : " on " + device)
         << (cold ? ", weights cold" : "") << "\n";
  }

  void round(const TuneReport& report, int trials, double elapsed) const {
    if (options_.quiet) return;
    const double left = elapsed / report.trials * static_cast<double>(trials - report.trials);
    char line[256];
    std::snprintf(line, sizeof line,
                  "[loom] %s: round %d: %d/%d trials, best %.2f GFLOP/s, %d failed, %s "
                  "elapsed, ~%s left\n",
                  name_.c_str(), report.rounds, report.trials, trials, report.best_gflops(),
                  report.failures, ::loom::detail::format_duration(elapsed).c_str(),
                  ::loom::detail::format_duration(left).c_str());
    log_ << line;
  }

  void done(const TuneReport& report, int rerank_top) const {
    if (options_.quiet) return;
    if (report.reranked > 0)
      log_ << "[loom] " << name_ << ": measured the " << rerank_top << " fastest again ("
           << report.reranked << " measurements, "
           << ::loom::detail::format_duration(report.rerank_seconds) << "); best by median "
           << report.best_gflops() << " GFLOP/s\n";
    // Which errors, since most failures of a healthy run are the measurer's slow-program
    // cut-offs (timeouts), not broken programs.
    std::string failed = std::to_string(report.failures) + " failed";
    const char* sep = ": ";
    for (size_t e = 0; e < report.failures_by_error.size(); ++e)
      if (report.failures_by_error[e] > 0) {
        failed = failed + sep + measure_error_name(static_cast<MeasureError>(e)) + " " +
                 std::to_string(report.failures_by_error[e]);
        sep = ", ";
      }
    char line[448];
    std::snprintf(
        line, sizeof line,
        "[loom] %s: done (%s): %d trials (%s; %d resumed) in %s, best %.2f "
        "GFLOP/s (%.3f ms); time: search %.1f s, model %.1f s, build %.1f s, run %.1f s\n",
        name_.c_str(), report.stop_reason.c_str(), report.trials, failed.c_str(), report.resumed,
        ::loom::detail::format_duration(report.wall_seconds).c_str(), report.best_gflops(),
        report.best_cost < kFailedCost ? report.best_cost * 1e3 : 0.0, report.search_seconds,
        report.train_seconds, report.compile_seconds, report.run_seconds);
    log_ << line;
  }

 private:
  const TuneOptions& options_;
  std::ostream& log_;
  const std::string name_;
};

}  // namespace detail
}  // namespace search
LOOM_END_NAMESPACE
