// The decoder step's threads: a pool whose caller never waits for a thread that has not started.
//
// A decoder step is ~2 ms of memory reads (the vocabulary projection's 40 MB of bf16, the
// layers' linears, the audio's keys and values). One core reads ~35 GB/s here; two read more.
// OpenMP's parallel-for gave every thread a fixed share and waited at its barrier for all of
// them: on a shared machine a helper thread not yet scheduled stalled the step for a whole
// time slice (steps 2-20x slower, docs/speed.md). Here a job is cut into parts that
// threads claim one at a time, the caller too, so a helper that is asleep or descheduled
// leaves its parts to the caller; the caller waits only for a part a helper holds.
//
// Where helpers do not help (the machine is busy: a helper loses its core while it holds a
// part, or shares the caller's core), the caller sees it: a job took about as long as its
// parts would take it alone (its own thread's CPU time per part says how long that is). Then
// the next jobs run on the caller alone, for longer each time it happens again.
//
// Every part writes its own outputs, whatever thread runs it: the floats are the same on any
// number of threads. Helpers spin a little after their last part (a step posts its next job
// within microseconds), then sleep on a condition variable.
//
// One pool per library (hidden symbols); threads start on first use and live for the process
// (never joined: a library is not unloaded). A forked child starts with no helpers.

#include <pthread.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <new>
#include <thread>

#include "vec.h"

namespace {

// Helpers look for a new job this many times (a pause each, tens of microseconds in all)
// before sleeping.
constexpr int SPINS = 2000;
// The caller waits for a helper's last part with this many pauses before yielding its core
// (to a helper that may be waiting for it).
constexpr int WAIT_SPINS = 100;
// The jobs' time over their time alone, summed over the recent jobs (older jobs' times
// weighed down by DECAY a job: about the last 50, a decoder step's): over NO_GAIN, the next
// ALONE_JOBS jobs (about 20 decoder steps) run on the caller alone, twice as many each time
// in a row, up to 2^MAX_DOUBLINGS times; under GAIN the doubling restarts. Two threads that
// help take about 0.5-0.7 of the time alone.
// No judgement before EVIDENCE seconds of work (a helper's first wake-up is slow).
constexpr double DECAY = 0.98, NO_GAIN = 0.9, GAIN = 0.75, EVIDENCE = 2e-3;
constexpr long ALONE_JOBS = 1000;
constexpr int MAX_DOUBLINGS = 6;

inline void pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

inline double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

inline double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The claim word: job id (high 32 bits), parts (16 bits), next unclaimed part (low 16 bits).
// A claim is a compare-and-swap of the whole word, so a late helper can never claim a part of
// a job that has been replaced.
constexpr uint64_t PART_MASK = 0xffff;

struct Pool {
  std::atomic<uint64_t> claim{0};
  std::atomic<uint32_t> posted{0};  // the id of the latest job
  std::atomic<int> done{0};         // parts finished of the current job
  std::atomic<int> sleepers{0};
  void (*task)(void*, int) = nullptr;
  void* ctx = nullptr;
  int helpers = 0;  // threads started
  std::mutex mutex;
  std::condition_variable wake;
  // the caller's own (under g_run_mutex)
  double took = 0, alone_would = 0;  // the recent jobs' seconds, and theirs on the caller alone
  int doublings = 0;
  long alone = 0;  // jobs left to run on the caller alone

  // Claims and runs parts of job id until none is left; the number it ran.
  int work(uint32_t id) {
    int ran = 0;
    uint64_t c = claim.load(std::memory_order_acquire);
    while ((uint32_t)(c >> 32) == id && (c & PART_MASK) < ((c >> 16) & PART_MASK)) {
      if (!claim.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      task(ctx, (int)(c & PART_MASK));  // task and ctx stay while a part of id is unfinished
      done.fetch_add(1, std::memory_order_release);
      ran++;
      c = claim.load(std::memory_order_acquire);
    }
    return ran;
  }

  void helper() {
    uint32_t seen = posted.load(std::memory_order_acquire);
    for (;;) {
      uint32_t id = seen;
      for (int i = 0; i < SPINS && (id = posted.load(std::memory_order_acquire)) == seen; i++) pause();
      if (id == seen) {
        std::unique_lock<std::mutex> lock(mutex);
        sleepers.fetch_add(1);
        wake.wait(lock, [&] { return (id = posted.load()) != seen; });
        sleepers.fetch_sub(1);
      }
      seen = id;
      work(id);
    }
  }

  // Publishes a job to the helpers (waking those asleep); its id.
  uint32_t post(int parts, int threads, void (*fn)(void*, int), void* arg) {
    while (helpers < threads - 1) {
      std::thread([this] { helper(); }).detach();
      helpers++;
    }
    task = fn;
    ctx = arg;
    done.store(0, std::memory_order_relaxed);
    const uint32_t id = posted.load(std::memory_order_relaxed) + 1;
    claim.store((uint64_t)id << 32 | (uint64_t)parts << 16, std::memory_order_release);
    posted.store(id);  // sequentially consistent with the helpers' sleepers/posted pair
    if (sleepers.load() > 0) {
      std::lock_guard<std::mutex> lock(mutex);
      wake.notify_all();
    }
    return id;
  }

  void run(int parts, int threads, void (*fn)(void*, int), void* arg) {
    if (alone > 0) {
      alone--;
      for (int i = 0; i < parts; i++) fn(arg, i);
      return;
    }
    const double wall0 = wall_seconds(), cpu0 = thread_cpu_seconds();
    const int mine = work(post(parts, threads, fn, arg));
    const double cpu = thread_cpu_seconds() - cpu0;
    for (int i = 0; done.load(std::memory_order_acquire) < parts; i++)
      if (i < WAIT_SPINS) pause();
      else std::this_thread::yield();
    if (mine > 0 && cpu > 0) judge(wall_seconds() - wall0, cpu / mine * parts);
  }

  // A job took `seconds`; on the caller alone it would have taken about `alone_seconds`.
  void judge(double seconds, double alone_seconds) {
    took = DECAY * took + seconds;
    alone_would = DECAY * alone_would + alone_seconds;
    const double share = took / alone_would;
    if (share < GAIN) doublings = 0;
    if (share <= NO_GAIN || alone_would < EVIDENCE) return;
    alone = ALONE_JOBS << doublings;
    doublings = doublings < MAX_DOUBLINGS ? doublings + 1 : doublings;
    took = alone_would = 0;
  }
};

Pool* g_pool = nullptr;  // never deleted: detached helpers use it until the process ends
std::mutex g_pool_mutex;
std::mutex g_run_mutex;  // one job at a time (callers on other Python threads take turns)

// After fork() only the forking thread lives on: no helpers, and no lock held by another thread.
void forget_pool_in_child() {
  g_pool = nullptr;
  new (&g_pool_mutex) std::mutex();
  new (&g_run_mutex) std::mutex();
}

Pool* pool() {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  if (!g_pool) {
    static bool registered = false;
    if (!registered) pthread_atfork(nullptr, nullptr, forget_pool_in_child);
    registered = true;
    g_pool = new Pool();
  }
  return g_pool;
}

}  // namespace

// Runs fn(arg, 0) ... fn(arg, parts - 1), each once, on the caller and up to threads - 1
// helpers; returns when all are done (more than 65535 parts: on the caller).
void TK(run_parts)(int parts, int threads, void (*fn)(void*, int), void* arg) {
  if (parts <= 0) return;
  if (threads <= 1 || parts == 1 || parts > (int)PART_MASK) {
    for (int i = 0; i < parts; i++) fn(arg, i);
    return;
  }
  Pool* p = pool();
  std::lock_guard<std::mutex> lock(g_run_mutex);
  p->run(parts, threads, fn, arg);
}
