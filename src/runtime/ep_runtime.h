// Expert parallelism across processes: rank 0 runs the command (HTTP and the scheduler, or
// run / bench / eval) and broadcasts every forward step it takes; the other ranks replay each
// step on their replica of the model and KV cache, so that every MoE layer finds all ranks in
// its collectives. Only the experts are split (model/ and parallel/).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "parallel/comm.h"

namespace mx {

// Rank 0: from now on every valid forward_batch of `model` is broadcast first.
void install_step_broadcast(DecoderModel& model, Comm& comm);
// Ranks 1..: replays broadcast steps until rank 0 ends the job (ep_end_workers).
Status run_ep_worker(DecoderModel& model, Comm& comm);
// Rank 0: the workers leave their loop.
Status ep_end_workers(Comm& comm);

// What each rank reports for `bench` (expert and tensor parallelism).
struct EpRankStats {
  uint64_t rss_bytes = 0;       // now
  uint64_t load_rss_bytes = 0;  // when the model had loaded (before any probe or cache)
  uint64_t expert_bytes = 0;    // of its own experts
  uint64_t weight_bytes = 0;    // of all its weights (its shares under tensor parallelism)
  DispatchStats dispatch;
};
// Rank 0: every rank's figures, rank order (the workers answer from their loop).
Result<std::vector<EpRankStats>> gather_ep_stats(DecoderModel& model, Comm& comm);

// Every rank's dispatch counters summed (rank 0 only, like gather_ep_stats).
Result<DispatchStats> total_dispatch_stats(DecoderModel& model, Comm& comm);

// Resident set of this process, from /proc/self/statm (0 where unavailable).
uint64_t resident_bytes();
// The process's peak resident set (VmHWM), load included; 0 where /proc does not say.
uint64_t peak_resident_bytes();
// Resident bytes on transparent huge pages (AnonHugePages); 0 where /proc does not say.
uint64_t huge_page_resident_bytes();
// Starts the peak over from the current resident set (Linux clear_refs); false where the
// kernel does not allow it.
bool reset_peak_resident();

}  // namespace mx
