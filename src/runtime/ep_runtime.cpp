#include "runtime/ep_runtime.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <list>
#include <memory>

#include "core/log.h"

namespace mx {
namespace {

uint64_t g_load_rss = 0;

enum class Op : uint32_t { kForward = 1, kStats = 2, kEnd = 3, kRestore = 4 };

// Fixed-size head of every broadcast; a forward's slices follow as int64 words.
struct StepHeader {
  uint32_t op = 0;
  uint32_t seqs = 0;
  uint64_t kv_id = 0;
  int32_t num_blocks = 0, block_size = 0, kv_dtype = 0, slots = 0;
  // Rank 0 profiles this step: every rank times its MoE layers, whose timing adds a barrier
  // before each collective (parallel/ep_dispatch.cpp), so that they meet the same ones.
  uint32_t timed = 0;
  // The step computes hidden states, not logits (DecoderModel::forward_hidden: embeddings),
  // so that no rank runs the lm_head's collective.
  uint32_t hidden = 0;
  uint64_t words = 0;
  // kRestore: the slot of cache kv_id whose recurrent state goes back to the one after fed
  // position `position` of the last verify.
  int64_t slot = 0, position = 0;
  // The recurrent states a verify keeps per slot (PagedKv::reserve_state_steps).
  int64_t state_steps = 0;
};

// Headers go by broadcast_idle on every rank: MPI matches a nonblocking broadcast only with
// nonblocking ones.
Status send_header(Comm& comm, StepHeader h) { return comm.broadcast_idle(&h, sizeof h, 0); }

// Per slice: count, start, logits mode (the stepwise flag at bit 8, keep_states at bit 9,
// top1_logits at bit 10, the data-parallel rank from bit 16), slot, block count, then tokens
// and blocks.
std::vector<int64_t> encode(std::span<const SeqSlice> seqs, const PagedKv& kv) {
  std::vector<int64_t> w;
  for (const SeqSlice& s : seqs) {
    const int64_t blocks = (s.start + s.count + kv.block_size() - 1) / kv.block_size();
    const int64_t mode = static_cast<int64_t>(s.logits) | (s.stepwise ? 256 : 0) |
                         (s.keep_states ? 512 : 0) | (s.top1_logits ? 1024 : 0) |
                         static_cast<int64_t>(s.dp_rank) << 16;
    w.insert(w.end(), {s.count, s.start, mode, s.slot, blocks});
    w.insert(w.end(), s.tokens, s.tokens + s.count);
    w.insert(w.end(), s.blocks, s.blocks + blocks);
  }
  return w;
}

// The replicas of rank 0's caches, by id, most recent first (rank 0 never says when a cache
// dies, so a few are kept).
class KvReplicas {
 public:
  PagedKv& get(const ModelConfig& c, const StepHeader& h) {
    for (auto it = list_.begin(); it != list_.end(); ++it) {
      if (it->first == h.kv_id) {
        list_.splice(list_.begin(), list_, it);
        PagedKv& kv = *list_.front().second;
        if (kv.state_steps() < h.state_steps) {
          kv.reserve_state_steps(static_cast<int32_t>(h.state_steps));
        }
        return kv;
      }
    }
    if (list_.size() >= 4) list_.pop_back();
    list_.emplace_front(h.kv_id,
                        std::make_unique<PagedKv>(c, h.num_blocks, h.block_size,
                                                  static_cast<KvDtype>(h.kv_dtype), h.slots));
    if (h.state_steps > 0) {
      list_.front().second->reserve_state_steps(static_cast<int32_t>(h.state_steps));
    }
    return *list_.front().second;
  }
  PagedKv* find(uint64_t id) {
    for (auto& [kv_id, kv] : list_) {
      if (kv_id == id) return kv.get();
    }
    return nullptr;
  }

 private:
  std::list<std::pair<uint64_t, std::unique_ptr<PagedKv>>> list_;
};

Status replay(DecoderModel& model, Comm& comm, const StepHeader& h, KvReplicas& kvs) {
  std::vector<int64_t> w(h.words);
  MX_RETURN_IF_ERROR(comm.broadcast(w.data(), static_cast<int64_t>(w.size() * 8), 0));
  std::vector<std::vector<int32_t>> tokens(h.seqs), blocks(h.seqs);
  std::vector<SeqSlice> seqs(h.seqs);
  size_t at = 0;
  for (uint32_t i = 0; i < h.seqs; ++i) {
    SeqSlice& s = seqs[i];
    s.count = w[at];
    s.start = w[at + 1];
    // Each rank computes its share of the vocabulary's logits for rank 0, which samples.
    s.logits = static_cast<SeqSlice::Logits>(w[at + 2] & 255);
    s.stepwise = (w[at + 2] & 256) != 0;
    s.keep_states = (w[at + 2] & 512) != 0;
    s.top1_logits = (w[at + 2] & 1024) != 0;
    s.dp_rank = static_cast<int32_t>(w[at + 2] >> 16);
    s.slot = static_cast<int32_t>(w[at + 3]);
    const int64_t nb = w[at + 4];
    at += 5;
    tokens[i].assign(w.begin() + static_cast<int64_t>(at),
                     w.begin() + static_cast<int64_t>(at) + s.count);
    at += static_cast<size_t>(s.count);
    blocks[i].assign(w.begin() + static_cast<int64_t>(at),
                     w.begin() + static_cast<int64_t>(at) + nb);
    at += static_cast<size_t>(nb);
    s.tokens = tokens[i].data();
    s.blocks = blocks[i].data();
  }
  PagedKv& kv = kvs.get(model.config(), h);
  ForwardProfile unused;
  model.set_profile(h.timed != 0 ? &unused : nullptr);
  Status st = Status::ok();
  if (h.hidden != 0) {
    // Every row's hidden state is the same on every rank; the workers' copy is dropped.
    int64_t rows = 0;
    for (const SeqSlice& s : seqs) {
      rows += s.logits == SeqSlice::Logits::kAll    ? s.count
              : s.logits == SeqSlice::Logits::kLast ? 1
                                                    : 0;
    }
    std::vector<float> dropped(static_cast<size_t>(rows * model.config().hidden_size));
    st = model.forward_hidden(seqs, kv, dropped.data());
  } else {
    st = model.forward_batch(seqs, kv, nullptr);
  }
  model.set_profile(nullptr);
  return st;
}

EpRankStats own_stats(DecoderModel& model) {
  EpRankStats s;
  s.rss_bytes = resident_bytes();
  s.load_rss_bytes = g_load_rss;
  for (const DecoderLayer& l : model.layers)
    if (l.moe) s.expert_bytes += l.moe->experts->weight_bytes();
  s.dispatch = model.dispatcher().stats();
  s.weight_bytes = model.weight_bytes();
  return s;
}

constexpr int kStatWords = 13;

void put(const EpRankStats& s, int64_t* w) {
  const DispatchStats& d = s.dispatch;
  const uint64_t v[kStatWords] = {s.rss_bytes,         s.expert_bytes,       d.rows_sent,
                                  d.row_bytes_sent,    d.meta_bytes_sent,    d.combine_bytes_sent,
                                  d.gather_bytes_sent, d.low_latency_layers, d.normal_layers,
                                  d.fallback_layers,   d.fallback_steps,     s.load_rss_bytes,
                                  s.weight_bytes};
  for (int i = 0; i < kStatWords; ++i) w[i] = static_cast<int64_t>(v[i]);
}

EpRankStats get(const int64_t* w) {
  EpRankStats s;
  auto u = [w](int i) { return static_cast<uint64_t>(w[i]); };
  s.rss_bytes = u(0);
  s.expert_bytes = u(1);
  DispatchStats& d = s.dispatch;
  d.rows_sent = u(2);
  d.row_bytes_sent = u(3);
  d.meta_bytes_sent = u(4);
  d.combine_bytes_sent = u(5);
  d.gather_bytes_sent = u(6);
  d.low_latency_layers = u(7);
  d.normal_layers = u(8);
  d.fallback_layers = u(9);
  d.fallback_steps = u(10);
  s.load_rss_bytes = u(11);
  s.weight_bytes = u(12);
  return s;
}

Status exchange_stats(DecoderModel& model, Comm& comm, std::vector<EpRankStats>* out) {
  std::vector<int64_t> w(static_cast<size_t>(comm.size() * kStatWords), 0);
  put(own_stats(model), w.data() + comm.rank() * kStatWords);
  MX_RETURN_IF_ERROR(comm.all_reduce_sum(w.data(), static_cast<int64_t>(w.size())));
  if (out != nullptr) {
    out->clear();
    for (int r = 0; r < comm.size(); ++r) out->push_back(get(w.data() + r * kStatWords));
  }
  return Status::ok();
}

}  // namespace

uint64_t resident_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

namespace {
// Bytes from the first line of /proc file `path` that `format` ("Field: %llu kB") matches; 0
// where there is none.
uint64_t proc_kb_field(const char* path, const char* format) {
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, format, &kb) == 1) break;
  }
  std::fclose(f);
  return kb * 1024;
}
}  // namespace

uint64_t peak_resident_bytes() { return proc_kb_field("/proc/self/status", "VmHWM: %llu kB"); }

uint64_t huge_page_resident_bytes() {
  return proc_kb_field("/proc/self/smaps_rollup", "AnonHugePages: %llu kB");
}

bool reset_peak_resident() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

void install_step_broadcast(DecoderModel& model, Comm& comm) {
  g_load_rss = resident_bytes();
  model.set_step_hook([&comm, &model](std::span<const SeqSlice> seqs, const PagedKv& kv) {
    const std::vector<int64_t> w = encode(seqs, kv);
    StepHeader h;
    h.op = static_cast<uint32_t>(Op::kForward);
    h.seqs = static_cast<uint32_t>(seqs.size());
    h.kv_id = kv.id();
    h.num_blocks = kv.num_blocks();
    h.block_size = kv.block_size();
    h.kv_dtype = static_cast<int32_t>(kv.dtype());
    h.slots = kv.slots();
    h.state_steps = kv.state_steps();
    h.timed = model.profiling() ? 1 : 0;
    h.hidden = model.hidden_pass() ? 1 : 0;
    h.words = w.size();
    Status st = send_header(comm, h);
    if (st.is_ok())
      st = comm.broadcast(const_cast<int64_t*>(w.data()), static_cast<int64_t>(w.size() * 8), 0);
    if (!st.is_ok())
      comm.abort("broadcasting a step to the expert-parallel ranks failed: " + st.to_string());
  });
  if (!model.config().is_hybrid()) return;  // no recurrent state to roll back
  model.set_restore_hook([&comm](const PagedKv& kv, int32_t slot, int64_t p) {
    StepHeader h;
    h.op = static_cast<uint32_t>(Op::kRestore);
    h.kv_id = kv.id();
    h.slot = slot;
    h.position = p;
    const Status st = send_header(comm, h);
    if (!st.is_ok())
      comm.abort("broadcasting a rollback to the expert-parallel ranks failed: " + st.to_string());
  });
}

Status run_ep_worker(DecoderModel& model, Comm& comm) {
  g_load_rss = resident_bytes();
  KvReplicas kvs;
  for (;;) {
    StepHeader h;
    MX_RETURN_IF_ERROR(comm.broadcast_idle(&h, sizeof h, 0));
    switch (static_cast<Op>(h.op)) {
      case Op::kEnd:
        return Status::ok();
      case Op::kStats:
        MX_RETURN_IF_ERROR(exchange_stats(model, comm, nullptr));
        break;
      case Op::kRestore: {
        PagedKv* kv = kvs.find(h.kv_id);
        if (kv == nullptr || h.position < 0 || h.position >= kv->state_steps()) {
          MX_LOG_ERROR("a rollback names a cache or position this rank never replayed");
        } else {
          kv->restore_state(static_cast<int32_t>(h.slot), h.position);
        }
        break;
      }
      case Op::kForward: {
        // Rank 0 validated the step; a failure here is this replica's own and is reported
        // (rank 0 sees the same inputs and fails alike).
        const Status st = replay(model, comm, h, kvs);
        if (!st.is_ok()) MX_LOG_ERROR("replaying a step failed: " + st.to_string());
        break;
      }
      default:
        return invalid_argument("unknown expert-parallel step " + std::to_string(h.op));
    }
  }
}

Status ep_end_workers(Comm& comm) {
  StepHeader h;
  h.op = static_cast<uint32_t>(Op::kEnd);
  return send_header(comm, h);
}

Result<DispatchStats> total_dispatch_stats(DecoderModel& model, Comm& comm) {
  MX_ASSIGN_OR_RETURN(std::vector<EpRankStats> ranks, gather_ep_stats(model, comm));
  DispatchStats t;
  for (const EpRankStats& r : ranks) {
    const DispatchStats& d = r.dispatch;
    t.rows_sent += d.rows_sent;
    t.row_bytes_sent += d.row_bytes_sent;
    t.meta_bytes_sent += d.meta_bytes_sent;
    t.combine_bytes_sent += d.combine_bytes_sent;
    t.gather_bytes_sent += d.gather_bytes_sent;
  }
  // Layer passes and fallbacks are the same on every rank.
  const DispatchStats& d0 = ranks[0].dispatch;
  t.low_latency_layers = d0.low_latency_layers;
  t.normal_layers = d0.normal_layers;
  t.fallback_layers = d0.fallback_layers;
  t.fallback_steps = d0.fallback_steps;
  return t;
}

Result<std::vector<EpRankStats>> gather_ep_stats(DecoderModel& model, Comm& comm) {
  StepHeader h;
  h.op = static_cast<uint32_t>(Op::kStats);
  MX_RETURN_IF_ERROR(send_header(comm, h));
  std::vector<EpRankStats> out;
  MX_RETURN_IF_ERROR(exchange_stats(model, comm, &out));
  return out;
}

}  // namespace mx
