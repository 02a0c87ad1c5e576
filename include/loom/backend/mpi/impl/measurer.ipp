// Bodies of loom/backend/mpi/measurer.hpp: the only file that includes <mpi.h>.
#include "loom/backend/mpi/measurer.hpp"

#include "loom/error.hpp"
#include "loom/sched/record.hpp"

#include <mpi.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <ostream>

LOOM_BEGIN_NAMESPACE
namespace mpi {
namespace detail {

enum Tag : int { kHello = 1, kWork = 2, kResult = 3, kDone = 4, kStop = 5 };

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline void send_text(const std::string& text, int to, int tag) {
  MPI_Send(text.data(), static_cast<int>(text.size()), MPI_CHAR, to, tag, MPI_COMM_WORLD);
}

/// The next message from `from` (MPI_ANY_SOURCE: anyone): its text, sender and tag.
struct Message {
  std::string text;
  int source = 0;
  int tag = 0;
};

inline Message receive(int from) {
  // Polls with sleeps instead of a blocking MPI_Probe: Open MPI's blocking calls spin a core at
  // 100 %, and the ranks wait on hosts where others work (the search rank next to a worker that
  // builds and times, a worker next to the search rank while it searches). A message waits at
  // most 1 ms to be read, against the tenths of a second a program takes to build and run.
  MPI_Status status;
  int arrived = 0;
  for (int idle = 0;; ++idle) {
    MPI_Iprobe(from, MPI_ANY_TAG, MPI_COMM_WORLD, &arrived, &status);
    if (arrived) break;
    ::usleep(idle < 100 ? 50 : 1000);
  }
  int count = 0;
  MPI_Get_count(&status, MPI_CHAR, &count);
  Message m;
  m.source = status.MPI_SOURCE;
  m.tag = status.MPI_TAG;
  m.text.resize(static_cast<size_t>(count));
  MPI_Recv(m.text.data(), count, MPI_CHAR, m.source, m.tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  return m;
}

inline nlohmann::json result_to_json(size_t index, const search::MeasureResult& r) {
  return {{"index", index},
          {"costs", r.costs},
          {"error", static_cast<int>(r.error)},
          {"message", r.error_message},
          {"compile_s", r.compile_seconds},
          {"run_s", r.run_seconds}};
}

inline search::MeasureResult result_from_json(const nlohmann::json& j) {
  search::MeasureResult r;
  r.costs = j.at("costs").get<std::vector<double>>();
  r.error = static_cast<search::MeasureError>(j.at("error").get<int>());
  r.error_message = j.at("message").get<std::string>();
  r.compile_seconds = j.at("compile_s").get<double>();
  r.run_seconds = j.at("run_s").get<double>();
  return r;
}

}  // namespace detail

LOOM_DECL Environment::Environment(int& argc, char**& argv) {
  int ready = 0;
  MPI_Initialized(&ready);
  if (ready) return;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  owns_ = true;
}

LOOM_DECL Environment::Environment() {
  int ready = 0;
  MPI_Initialized(&ready);
  if (ready) return;
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  owns_ = true;
}

LOOM_DECL Environment::~Environment() {
  int done = 0;
  MPI_Finalized(&done);
  if (owns_ && !done) MPI_Finalize();
}

LOOM_DECL bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

namespace detail {

// MPI itself aborts the process on a call before MPI_Init, with a message that does not say
// what to do in loom's terms.
inline void require_initialized(const char* what) {
  int ready = 0;
  MPI_Initialized(&ready);
  LOOM_USER_CHECK(ready, "loom.mpi.E1303")
      << "loom::mpi::" << what
      << "(): MPI is not initialized; construct a loom::mpi::Environment at the start of main()";
}

}  // namespace detail

LOOM_DECL int rank() {
  detail::require_initialized("rank");
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

LOOM_DECL int size() {
  detail::require_initialized("size");
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

LOOM_DECL void barrier() {
  detail::require_initialized("barrier");
  MPI_Barrier(MPI_COMM_WORLD);
}

LOOM_DECL MpiMeasurer::MpiMeasurer(search::MeasureOptions options,
                                   cpu_jit::LocalMeasurerOptions local, MpiMeasurerOptions mpi)
    : local_(std::move(options), std::move(local)), mpi_(mpi), started_(detail::now_seconds()) {
  int ready = 0;
  MPI_Initialized(&ready);
  LOOM_USER_CHECK(ready && rank() == 0 && size() >= 2 && mpi_.chunk >= 0, "loom.mpi.E1301")
      << "MpiMeasurer: needs MPI initialized (construct a loom::mpi::Environment first), this "
         "process to be rank 0 and at least one other rank running serve_measurements, and "
         "chunk ≥ 0; here MPI is "
      << (ready ? "initialized" : "not initialized") << (ready ? ", rank " : "")
      << (ready ? std::to_string(rank()) + " of " + std::to_string(size()) : "") << ", chunk "
      << mpi_.chunk << " (launch with mpirun -np N, N ≥ 2)";
  const size_t ranks = static_cast<size_t>(size());
  hosts_.assign(ranks, "");
  stats_.rank_programs.assign(ranks, 0);
  stats_.rank_seconds.assign(ranks, 0);
  std::vector<std::string> devices(ranks);
  std::vector<int> threads(ranks, 0);
  for (size_t i = 1; i < ranks; ++i) {
    const detail::Message m = detail::receive(MPI_ANY_SOURCE);
    LOOM_INTERNAL_CHECK(m.tag == detail::kHello);
    const nlohmann::json j = nlohmann::json::parse(m.text);
    const size_t r = static_cast<size_t>(m.source);
    hosts_[r] = j.at("host").get<std::string>();
    devices[r] = j.at("device").get<std::string>();
    threads[r] = j.at("threads").get<int>();
  }
  device_ = devices[1];
  threads_ = threads[1];
  bool same = true;
  for (size_t r = 2; r < ranks; ++r) same = same && devices[r] == device_ && threads[r] == threads_;
  if (!same) {
    std::string list;
    for (size_t r = 1; r < ranks; ++r)
      list += (r > 1 ? ", " : "") + std::string("rank ") + std::to_string(r) + " on " + hosts_[r] +
              ": " + devices[r] + " × " + std::to_string(threads[r]) + " threads";
    // Stop the workers first, so that the error ends the job cleanly instead of leaving them
    // waiting.
    for (size_t r = 1; r < ranks; ++r) detail::send_text("", static_cast<int>(r), detail::kStop);
    LOOM_USER_FAIL("loom.mpi.E1302")
        << "MpiMeasurer: the workers differ (" << list
        << "); costs measured on different CPUs or thread counts cannot compete in one search: "
           "run one job per kind of machine (a hostfile each), with the same --threads";
  }
}

LOOM_DECL MpiMeasurer::~MpiMeasurer() {
  int done = 0;
  MPI_Finalized(&done);
  if (done) return;
  for (int r = 1; r < size(); ++r) detail::send_text("", r, detail::kStop);
}

LOOM_DECL std::vector<search::MeasureResult> MpiMeasurer::measure_each(
    const Task& task, const std::vector<sched::State>& states, const ResultCallback& on_result) {
  const double start = detail::now_seconds();
  const size_t n = states.size();
  const size_t workers = static_cast<size_t>(size()) - 1;
  std::vector<search::MeasureResult> results(n);
  if (n == 0) return results;
  const size_t chunk = mpi_.chunk > 0 ? static_cast<size_t>(mpi_.chunk)
                                      : std::max<size_t>(1, (n + 2 * workers - 1) / (2 * workers));
  size_t next = 0, done = 0;
  std::vector<double> sent_at(workers + 1, 0);
  std::vector<size_t> batch_programs(workers + 1, 0);
  auto send_chunk = [&](int to) {
    nlohmann::json programs = nlohmann::json::array();
    for (size_t i = next; i < std::min(n, next + chunk); ++i)
      programs.push_back({i, sched::history_to_json(states[i].steps())});
    next = std::min(n, next + chunk);
    const nlohmann::json work = {{"workload", task.workload_key()}, {"programs", programs}};
    sent_at[static_cast<size_t>(to)] = detail::now_seconds();
    detail::send_text(work.dump(), to, detail::kWork);
  };
  for (size_t r = 1; r <= workers && next < n; ++r) send_chunk(static_cast<int>(r));
  size_t busy = std::min(workers, (n + chunk - 1) / chunk);
  while (busy > 0) {
    const detail::Message m = detail::receive(MPI_ANY_SOURCE);
    const size_t r = static_cast<size_t>(m.source);
    const nlohmann::json j = nlohmann::json::parse(m.text);
    if (m.tag == detail::kResult) {
      const size_t index = j.at("index").get<size_t>();
      LOOM_INTERNAL_CHECK(index < n);
      results[index] = detail::result_from_json(j);
      ++done;
      ++batch_programs[r];
      ++stats_.rank_programs[r];
      if (on_result) on_result(index, results[index]);
    } else {
      LOOM_INTERNAL_CHECK(m.tag == detail::kDone);
      const double round_trip = detail::now_seconds() - sent_at[r];
      const double measuring = j.at("seconds").get<double>();
      stats_.rank_seconds[r] += measuring;
      stats_.overhead_seconds += std::max(0.0, round_trip - measuring);
      if (next < n)
        send_chunk(m.source);
      else
        --busy;
    }
  }
  LOOM_INTERNAL_CHECK(done == n);
  const double wall = detail::now_seconds() - start;
  stats_.batches += 1;
  stats_.programs += n;
  stats_.wall_seconds += wall;
  if (mpi_.progress) {
    // Trials per second over the whole run (what a user compares with one machine's rate),
    // and per worker over its own measuring time (a slow host shows as a low rate).
    const double elapsed = detail::now_seconds() - started_;
    std::string line = "[loom] mpi: " + std::to_string(n) + " programs on " +
                       std::to_string(workers) + " workers in " + std::to_string(wall) +
                       " s; in all " + std::to_string(stats_.programs) + " programs, ";
    char rate[64];
    std::snprintf(rate, sizeof rate, "%.2f trials/s; per rank", stats_.programs / elapsed);
    line += rate;
    for (size_t r = 1; r <= workers; ++r) {
      const double s = stats_.rank_seconds[r];
      std::snprintf(rate, sizeof rate, " %zu: %.2f/s", r,
                    s > 0 ? static_cast<double>(stats_.rank_programs[r]) / s : 0.0);
      line += rate;
    }
    std::snprintf(rate, sizeof rate, "; overhead %.1f ms/program\n",
                  1e3 * stats_.overhead_seconds / static_cast<double>(stats_.programs));
    *mpi_.progress << line + rate << std::flush;
  }
  return results;
}

LOOM_DECL void serve_measurements(const std::vector<Task>& tasks,
                                  const search::MeasureOptions& options,
                                  const cpu_jit::LocalMeasurerOptions& local) {
  cpu_jit::LocalMeasurer measurer(options, local);
  std::map<std::string, const Task*> by_key;
  for (const Task& t : tasks) by_key.emplace(t.workload_key(), &t);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const nlohmann::json hello = {
      {"host", host}, {"device", measurer.device()}, {"threads", measurer.threads()}};
  detail::send_text(hello.dump(), 0, detail::kHello);
  while (true) {
    const detail::Message m = detail::receive(0);
    if (m.tag == detail::kStop) return;
    LOOM_INTERNAL_CHECK(m.tag == detail::kWork);
    const nlohmann::json work = nlohmann::json::parse(m.text);
    const auto found = by_key.find(work.at("workload").get<std::string>());
    std::vector<size_t> indices;
    std::vector<sched::State> states;
    for (const nlohmann::json& p : work.at("programs")) {
      const size_t index = p.at(0).get<size_t>();
      search::MeasureResult failed;
      if (found == by_key.end()) {
        failed.error = search::MeasureError::unknown;
        failed.error_message = "this rank has no task with workload " +
                               work.at("workload").get<std::string>() +
                               " (every rank must extract its tasks from the same network)";
      } else {
        try {
          states.push_back(sched::replay(found->second->dag, sched::history_from_json(p.at(1))));
          indices.push_back(index);
          continue;
        } catch (const std::exception& e) {
          failed.error = search::MeasureError::instantiation;
          failed.error_message = e.what();
        }
      }
      detail::send_text(detail::result_to_json(index, failed).dump(), 0, detail::kResult);
    }
    // Only the measurer's time counts as measuring: parsing and replaying are the protocol's.
    const double start = detail::now_seconds();
    if (!states.empty())
      measurer.measure_each(*found->second, states, [&](size_t i, const search::MeasureResult& r) {
        detail::send_text(detail::result_to_json(indices[i], r).dump(), 0, detail::kResult);
      });
    const nlohmann::json finished = {{"seconds", detail::now_seconds() - start}};
    detail::send_text(finished.dump(), 0, detail::kDone);
  }
}

}  // namespace mpi
LOOM_END_NAMESPACE
