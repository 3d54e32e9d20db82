// A dynamic table's training lookup in one kernel: expiry, the index, the
// count-min sketch's admission, eviction and the rows' bookkeeping, as
// estimator_scale/embeddings/dynamic.py's module docstring describes them.
//
// Done as TensorFlow ops, a lookup is some sixty small kernels a micro-batch
// and table, whose scheduling costs more than their work; here it is one.
// The table's state stays in its variables (ids, last_seen, counts, fresh,
// sketch, pool), which checkpoints, re-shards and parameter servers treat as
// before; the index from id to row and the stack of free rows are a resource
// of this kernel's, rebuilt from `ids` once per session as before.
//
// Every decision is the same function of the multiset of ids and the update
// as dynamic.py's docstring gives, so a table split over ranks or tasks
// decides as one process does.

#define EIGEN_USE_THREADS

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/kernels/training_op_helpers.h"

namespace estimator_scale {
namespace {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::ResourceBase;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::Var;
using ::tensorflow::errors::InvalidArgument;

constexpr int64_t kFree = -1;
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
// How many items ahead a loop over random rows or index slots fetches the
// memory it will touch: the table is far larger than a cache, and a CPU
// keeps only so many misses in flight, so fetching every item first would
// drop most of the fetches.
constexpr int64_t kAhead = 16;
// 2^64 over the golden ratio, odd: multiplying by it maps the 64-bit ids
// one to one and spreads any run of ids over the product's top bits.
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

void Fetch(const void* address) { __builtin_prefetch(address, 1); }

// dynamic.mix with the multipliers dynamic.py passes (its _MULTIPLIERS: one
// per use, the last finishing each).
class Mixes {
 public:
  explicit Mixes(const std::vector<int64_t>& multipliers)
      : multipliers_(multipliers.begin(), multipliers.end()) {}

  int64_t Mix(int64_t key, int which) const {
    uint64_t x = static_cast<uint64_t>(key) * multipliers_[which];
    x ^= x >> 29;
    x *= multipliers_.back();
    x ^= x >> 32;
    return static_cast<int64_t>(x);
  }

  int64_t Bucket(int64_t key, int which, int64_t buckets) const {
    int64_t r = Mix(key, which) % buckets;
    return r < 0 ? r + buckets : r;
  }

 private:
  std::vector<uint64_t> multipliers_;
};

// The id -> row index: open addressing over kSlotsPerRow (id, row) slots a
// row, probed in order from a slot a hash of the id names. A lookup mostly
// reads the one cache line `Prefetch` fetches (a general hash map keeps ids
// and rows apart from its probe bytes, a miss more); an erase moves the
// slots after it back, so no tombstones pile up while ids stream through.
// At most a quarter of the slots are used: runs of used slots stay short,
// so a probe or an erase seldom reads on into a line not fetched. Ids are
// never negative, so -1 marks an empty slot.
class RowIndex {
 public:
  void Reset(int64_t rows) {
    size_ = std::max<uint64_t>(16, kSlotsPerRow * rows);
    slots_.assign(size_, Slot{kEmpty, 0});
  }

  void Prefetch(int64_t key) const { Fetch(&slots_[Home(key)]); }

  // The row of `key`, or kFree.
  int64_t Find(int64_t key) const {
    for (uint64_t i = Home(key);; i = Next(i)) {
      if (slots_[i].key == key) return slots_[i].row;
      if (slots_[i].key == kEmpty) return kFree;
    }
  }

  void Put(int64_t key, int64_t row) {
    uint64_t i = Home(key);
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = Next(i);
    slots_[i] = Slot{key, row};
  }

  void Erase(int64_t key) {
    uint64_t hole = Home(key);
    while (slots_[hole].key != key) {
      if (slots_[hole].key == kEmpty) return;
      hole = Next(hole);
    }
    // A later slot moves into the hole unless its home lies cyclically in
    // (hole, slot]: it would then no longer be found from there.
    for (uint64_t i = Next(hole); slots_[i].key != kEmpty; i = Next(i)) {
      const uint64_t home = Home(slots_[i].key);
      const bool stays = hole < i ? (hole < home && home <= i)
                                  : (hole < home || home <= i);
      if (!stays) {
        slots_[hole] = slots_[i];
        hole = i;
      }
    }
    slots_[hole].key = kEmpty;
  }

 private:
  static constexpr int64_t kEmpty = -1;
  static constexpr uint64_t kSlotsPerRow = 4;
  struct Slot {
    int64_t key;
    int64_t row;
  };
  // Fibonacci hashing of the id folded on itself, its product's top bits
  // scaled to the slots (a multiply, where a modulo would divide).
  uint64_t Home(int64_t key) const {
    const uint64_t x =
        static_cast<uint64_t>(key) ^ (static_cast<uint64_t>(key) >> 32);
    return static_cast<uint64_t>(
        (static_cast<unsigned __int128>(x * kGolden) * size_) >> 64);
  }
  uint64_t Next(uint64_t i) const { return i + 1 == size_ ? 0 : i + 1; }
  std::vector<Slot> slots_;
  uint64_t size_ = 0;
};

// The id -> row index and the stack of free rows (its top at the back).
class Index : public ResourceBase {
 public:
  std::string DebugString() const override { return "dynamic table index"; }
  tensorflow::mutex mu;
  RowIndex rows;
  std::vector<int64_t> free;
};

Status CopyOnRead(OpKernelContext* ctx, Var* var) {
  using Device = Eigen::ThreadPoolDevice;
  switch (var->tensor()->dtype()) {
    case tensorflow::DT_FLOAT:
      return tensorflow::EnsureSparseVariableAccess<Device, float>(ctx, var);
    case tensorflow::DT_INT64:
      return tensorflow::EnsureSparseVariableAccess<Device, int64_t>(ctx, var);
    case tensorflow::DT_INT32:
      return tensorflow::EnsureSparseVariableAccess<Device, int32_t>(ctx, var);
    case tensorflow::DT_BOOL:
      return tensorflow::EnsureSparseVariableAccess<Device, bool>(ctx, var);
    default:
      return InvalidArgument("dynamic table: a variable of ",
                             tensorflow::DataTypeString(var->tensor()->dtype()));
  }
}

// The variables a kernel takes, locked in address order, each made safe to
// update in place.
class LockedVariables {
 public:
  Status Take(OpKernelContext* ctx, const std::vector<int>& inputs) {
    for (int i : inputs) {
      Var* var = nullptr;
      TF_RETURN_IF_ERROR(
          tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, i), &var));
      vars_.push_back(var);
    }
    std::vector<Var*> order(vars_);
    std::sort(order.begin(), order.end());
    order.erase(std::unique(order.begin(), order.end()), order.end());
    for (Var* var : order) {
      // Copy-on-read: a read that aliases the buffer is copied, so
      // writing in place does not change a tensor another op holds.
      TF_RETURN_IF_ERROR(CopyOnRead(ctx, var));
      var->mu()->lock();
      locked_.push_back(var);
    }
    return ::tensorflow::OkStatus();
  }
  Tensor* operator[](int i) { return vars_[i]->tensor(); }
  ~LockedVariables() {
    for (auto it = locked_.rbegin(); it != locked_.rend(); ++it) {
      (*it)->mu()->unlock();
    }
    for (Var* var : vars_) var->Unref();
  }

 private:
  std::vector<Var*> vars_;
  std::vector<Var*> locked_;
};

Status GetIndex(OpKernelContext* ctx, Index** index) {
  return tensorflow::LookupOrCreateResource<Index>(ctx, tensorflow::HandleFromInput(ctx, 0), index,
                                       [](Index** made) {
                                         *made = new Index;
                                         return ::tensorflow::OkStatus();
                                       });
}

void Rebuild(Index* index, const int64_t* ids, int64_t rows) {
  index->rows.Reset(rows);
  index->free.clear();
  for (int64_t r = rows - 1; r >= 0; --r) {
    if (ids[r] >= 0) {
      index->rows.Put(ids[r], r);
    } else {
      index->free.push_back(r);  // the lowest free row on top
    }
  }
}

// The table's state while one lookup updates it.
struct Table {
  Index* index;
  int64_t* ids;
  int64_t* last_seen;
  int64_t* counts;
  bool* fresh;
  int32_t* sketch;  // [width, depth], or null
  int64_t sketch_width;
  int64_t sketch_depth;
  float* pool;
  int64_t rows;
  int64_t dimension;
  int64_t evicted = 0;

  // Frees `freed` in order: the last ends on top of the stack.
  void Free(const std::vector<int64_t>& freed) {
    const int64_t n = freed.size();
    for (int64_t i = 0; i < n; ++i) {
      if (i + 2 * kAhead < n) Fetch(ids + freed[i + 2 * kAhead]);
      if (i + kAhead < n) index->rows.Prefetch(ids[freed[i + kAhead]]);
      const int64_t r = freed[i];
      index->rows.Erase(ids[r]);
      index->free.push_back(r);
      ids[r] = kFree;
      last_seen[r] = kNever;
    }
    evicted += freed.size();
  }
};

class TrainRowsOp : public OpKernel {
 public:
  explicit TrainRowsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("min_count", &min_count_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("steps_to_live", &steps_to_live_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("expiry_period", &expiry_period_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("lfu", &lfu_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("evict_fraction", &evict_fraction_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("hash_vectors", &hash_vectors_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_sketch", &with_sketch_));
    std::vector<int64_t> multipliers;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("multipliers", &multipliers));
    OP_REQUIRES(ctx, multipliers.size() >= 3,
                InvalidArgument("dynamic table: ", multipliers.size(),
                                " multipliers, at least 3 wanted"));
    mixes_ = std::make_unique<Mixes>(multipliers);
  }

  void Compute(OpKernelContext* ctx) override {
    // Inputs: 0 index, 1 ids, 2 last_seen, 3 counts, 4 fresh, 5 pool,
    // 6 evicted, 7 built, 8 sketch, 9 keys, 10 key counts, 11 step.
    Index* index = nullptr;
    OP_REQUIRES_OK(ctx, GetIndex(ctx, &index));
    tensorflow::core::ScopedUnref unref(index);
    std::vector<int> inputs = {1, 2, 3, 4, 5, 6, 7};
    if (with_sketch_) inputs.push_back(8);
    LockedVariables vars;
    OP_REQUIRES_OK(ctx, vars.Take(ctx, inputs));
    tensorflow::mutex_lock lock(index->mu);
    // The first lookup of a session (after a restore, a re-shard, or on a
    // server whose index outlived the last session) rebuilds the index.
    bool& built = vars[6]->scalar<bool>()();
    if (!built) {
      Rebuild(index, vars[0]->flat<int64_t>().data(), vars[0]->NumElements());
      built = true;
    }

    Table t;
    t.index = index;
    t.ids = vars[0]->flat<int64_t>().data();
    t.last_seen = vars[1]->flat<int64_t>().data();
    t.counts = vars[2]->flat<int64_t>().data();
    t.fresh = vars[3]->flat<bool>().data();
    t.pool = vars[4]->flat<float>().data();
    t.rows = vars[0]->NumElements();
    t.dimension = vars[4]->dim_size(1);
    t.sketch = nullptr;
    if (with_sketch_) {
      t.sketch = vars[7]->flat<int32_t>().data();
      t.sketch_width = vars[7]->dim_size(0);
      t.sketch_depth = vars[7]->dim_size(1);
    }
    const auto keys = ctx->input(9).flat<int64_t>();
    const auto key_counts = ctx->input(10).flat<int64_t>();
    const int64_t step = ctx->input(11).scalar<int64_t>()();
    OP_REQUIRES(ctx, keys.size() == key_counts.size(),
                InvalidArgument("dynamic table: ", keys.size(), " keys and ",
                                key_counts.size(), " counts"));

    if (steps_to_live_ > 0 && step % expiry_period_ == 0) Expire(&t, step);

    // Where each key's row is. A row looked up is stamped with this update
    // at once, which keeps it out of this update's eviction; the keys
    // without one wait, with their positions.
    const int64_t n = keys.size();
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &out));
    auto rows = out->flat<int64_t>();
    std::vector<Sighting> missing;
    for (int64_t i = 0; i < std::min(n, kAhead); ++i) {
      index->rows.Prefetch(keys(i));
    }
    for (int64_t i = 0; i < n; ++i) {
      if (i + kAhead < n) index->rows.Prefetch(keys(i + kAhead));
      rows(i) = kFree;
      if (keys(i) < 0) continue;  // a missing value: never a row
      rows(i) = index->rows.Find(keys(i));
      if (rows(i) == kFree) missing.push_back({keys(i), i});
    }
    for (int64_t i = 0; i < n; ++i) {
      if (i + kAhead < n && rows(i + kAhead) != kFree) {
        Fetch(t.last_seen + rows(i + kAhead));
        Fetch(t.counts + rows(i + kAhead));
      }
      if (rows(i) == kFree) continue;
      t.last_seen[rows(i)] = step;
      t.counts[rows(i)] += key_counts(i);
    }
    std::vector<int64_t> admitted_rows, admitted_keys;
    if (!missing.empty()) {
      Admit(&t, std::move(missing), key_counts, step, rows, &admitted_rows,
            &admitted_keys);
    }

    vars[5]->scalar<int64_t>()() += t.evicted;

    const int64_t m = admitted_rows.size();
    Tensor* new_rows = nullptr;
    Tensor* new_keys = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({m}), &new_rows));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({m}), &new_keys));
    std::copy(admitted_rows.begin(), admitted_rows.end(),
              new_rows->flat<int64_t>().data());
    std::copy(admitted_keys.begin(), admitted_keys.end(),
              new_keys->flat<int64_t>().data());
  }

 private:
  // A key without a row and where in the lookup it was.
  struct Sighting {
    int64_t key;
    int64_t position;
  };

  // Where a key comes in the order ids are admitted: an odd multiple of
  // it (one to one), so that no range of ids is favoured when rows run
  // short, and cheap to sort by.
  static uint64_t AdmissionOrder(int64_t key) {
    return static_cast<uint64_t>(key) * kGolden;
  }

  // Sorts `sightings` by AdmissionOrder, a key's sightings in the order
  // they came: into about as many buckets as sightings by the order's top
  // bits, then by insertion within each bucket.
  static void SortForAdmission(std::vector<Sighting>* sightings) {
    const size_t n = sightings->size();
    int bits = 1;
    while ((size_t{1} << bits) < n) ++bits;
    auto bucket = [bits](const Sighting& s) {
      return AdmissionOrder(s.key) >> (64 - bits);
    };
    std::vector<size_t> starts((size_t{1} << bits) + 1, 0);
    for (const Sighting& s : *sightings) ++starts[bucket(s) + 1];
    for (size_t b = 1; b < starts.size(); ++b) starts[b] += starts[b - 1];
    std::vector<Sighting> sorted(n);
    for (const Sighting& s : *sightings) sorted[starts[bucket(s)]++] = s;
    for (size_t i = 1; i < n; ++i) {
      const Sighting s = sorted[i];
      size_t j = i;
      const uint64_t order = AdmissionOrder(s.key);
      for (; j > 0 && AdmissionOrder(sorted[j - 1].key) > order; --j) {
        sorted[j] = sorted[j - 1];
      }
      sorted[j] = s;
    }
    sightings->swap(sorted);
  }

  // Frees the rows unseen for steps_to_live updates, lowest row first.
  void Expire(Table* t, int64_t step) {
    std::vector<int64_t> stale;
    for (int64_t r = 0; r < t->rows; ++r) {
      if (t->last_seen[r] < step - steps_to_live_) stale.push_back(r);
    }
    t->Free(stale);
  }

  // Whether each candidate's count reaches min_count, the sketch counting
  // this micro-batch's sightings first.
  std::vector<bool> Admissible(Table* t, const std::vector<int64_t>& keys,
                               const std::vector<int64_t>& counts) {
    const int64_t depth = t->sketch_depth;
    std::vector<int64_t> cells(keys.size() * depth);
    for (size_t k = 0; k < keys.size(); ++k) {
      for (int64_t j = 0; j < depth; ++j) {
        cells[k * depth + j] = mixes_->Bucket(keys[k], j + 1, t->sketch_width);
        t->sketch[cells[k * depth + j] * depth + j] +=
            static_cast<int32_t>(counts[k]);
      }
    }
    std::vector<bool> admissible(keys.size());
    for (size_t k = 0; k < keys.size(); ++k) {
      int32_t estimate = std::numeric_limits<int32_t>::max();
      for (int64_t j = 0; j < depth; ++j) {
        estimate = std::min(estimate, t->sketch[cells[k * depth + j] * depth + j]);
      }
      admissible[k] = estimate >= min_count_;
    }
    return admissible;
  }

  // Frees, when fewer rows than `wanted` are free, the rows the policy
  // ranks last among those not looked up this update (their last_seen is
  // `step`; a free row's is kNever): at least 1/evict_fraction of the
  // table, the lowest score on top.
  //
  // The rows to free are the `count` lowest by (score, row). A table is
  // far larger than a cache, so it is read once: a sample of its rows
  // bounds the scores they can have, one pass gathers the rows within the
  // bound, and the rows to free are ranked among those. A bound that
  // gathers too few (a sample far off, by chance) gathers them all.
  void Evict(Table* t, int64_t wanted, int64_t step) {
    const int64_t short_by = wanted - static_cast<int64_t>(t->index->free.size());
    if (short_by <= 0) return;
    const int64_t* score = lfu_ ? t->counts : t->last_seen;
    const int64_t want = std::max(short_by, t->rows / evict_fraction_);
    int64_t candidates = 0;
    std::vector<int64_t> gathered = Gather(
        t, score, step, Bound(t, score, step, want), &candidates);
    const int64_t count = std::min(want, candidates);
    if (count <= 0) return;
    if (static_cast<int64_t>(gathered.size()) < count) {
      gathered = Gather(t, score, step, kNever, &candidates);
    }
    t->Free(Lowest(score, std::move(gathered), count));
  }

  // A score at or under which, judging by every stride-th row, at least
  // `want` candidates lie; kNever where the sample cannot tell.
  int64_t Bound(Table* t, const int64_t* score, int64_t step, int64_t want) {
    constexpr int64_t kSample = 1024;
    if (t->rows <= kSample) return kNever;
    const int64_t stride = t->rows / kSample;
    std::vector<int64_t> sample;
    sample.reserve(t->rows / stride + 1);
    for (int64_t r = 0; r < t->rows; r += stride) {
      if (t->last_seen[r] < step) sample.push_back(score[r]);
    }
    // How many of the `want` lowest candidates the sample holds on
    // average, and a margin of four standard deviations and more.
    const double expected = static_cast<double>(want) / stride;
    const int64_t k =
        static_cast<int64_t>(expected + 4 * std::sqrt(expected) + 4);
    if (k >= static_cast<int64_t>(sample.size())) return kNever;
    std::nth_element(sample.begin(), sample.begin() + k, sample.end());
    return sample[k];
  }

  // The candidates whose score is at most `bound`, in row order, and how
  // many candidates there are in all: a block of rows at a time, without
  // branches, as the pass is most of an eviction's time.
  std::vector<int64_t> Gather(Table* t, const int64_t* score, int64_t step,
                              int64_t bound, int64_t* candidates) {
    const int64_t* last_seen = t->last_seen;
    std::vector<int64_t> gathered;
    int64_t count = 0;
    constexpr int64_t kBlock = 1024;
    int64_t block[kBlock];
    for (int64_t start = 0; start < t->rows; start += kBlock) {
      const int64_t end = std::min(start + kBlock, t->rows);
      int64_t taken = 0;
      for (int64_t r = start; r < end; ++r) {
        const bool candidate = last_seen[r] < step;
        count += candidate;
        block[taken] = r;
        taken += candidate & (score[r] <= bound);
      }
      gathered.insert(gathered.end(), block, block + taken);
    }
    *candidates = count;
    return gathered;
  }

  // The `count` lowest of `rows` (in row order) by (score, row), from the
  // highest down, so that Free leaves the lowest on top of the stack. Their
  // threshold score comes from a histogram of the scores just above the
  // lowest, and each row's place from the histogram (a counting sort);
  // where the threshold lies beyond its reach, a partial sort ranks them.
  static std::vector<int64_t> Lowest(const int64_t* score,
                                     std::vector<int64_t> rows, int64_t count) {
    int64_t lowest = kNever;
    for (int64_t r : rows) lowest = std::min(lowest, score[r]);
    constexpr int64_t kReach = 4096;
    std::vector<int64_t> histogram(kReach + 1, 0);
    for (int64_t r : rows) ++histogram[std::min(score[r] - lowest, kReach)];
    int64_t offset = 0;
    for (int64_t below = 0;
         offset < kReach && below + histogram[offset] < count; ++offset) {
      below += histogram[offset];
    }
    std::vector<int64_t> freed(count);
    if (offset < kReach) {
      std::vector<int64_t> placed(offset + 1);  // rows placed below each score
      for (int64_t o = 1; o <= offset; ++o) {
        placed[o] = placed[o - 1] + histogram[o - 1];
      }
      for (int64_t r : rows) {
        if (score[r] > lowest + offset) continue;
        int64_t& at = placed[score[r] - lowest];
        if (at < count) freed[count - 1 - at++] = r;
      }
      return freed;
    }
    auto higher = [score](int64_t a, int64_t b) {
      return score[a] != score[b] ? score[a] > score[b] : a > b;
    };
    std::nth_element(rows.begin(), rows.end() - count, rows.end(), higher);
    std::sort(rows.end() - count, rows.end(), higher);
    std::copy(rows.end() - count, rows.end(), freed.begin());
    return freed;
  }

  // Gives the keys of `missing` rows, in AdmissionOrder, each once
  // with the sum of its sightings' counts, where the sketch admits them and
  // rows are free or can be freed.
  void Admit(Table* t, std::vector<Sighting> missing,
             const typename tensorflow::TTypes<int64_t>::ConstFlat& key_counts,
             int64_t step,
             typename tensorflow::TTypes<int64_t>::Flat rows,
             std::vector<int64_t>* admitted_rows,
             std::vector<int64_t>* admitted_keys) {
    SortForAdmission(&missing);
    // Each distinct key, its total, and where its sightings begin.
    std::vector<int64_t> keys, totals, first;
    keys.reserve(missing.size());
    totals.reserve(missing.size());
    first.reserve(missing.size() + 1);
    for (size_t i = 0; i < missing.size(); ++i) {
      if (i == 0 || missing[i].key != missing[i - 1].key) {
        keys.push_back(missing[i].key);
        totals.push_back(0);
        first.push_back(i);
      }
      totals.back() += key_counts(missing[i].position);
    }
    first.push_back(missing.size());
    std::vector<size_t> kept;
    if (t->sketch != nullptr) {
      std::vector<bool> admissible = Admissible(t, keys, totals);
      for (size_t k = 0; k < keys.size(); ++k) {
        if (admissible[k]) kept.push_back(k);
      }
    } else {
      kept.resize(keys.size());
      for (size_t k = 0; k < keys.size(); ++k) kept[k] = k;
    }
    if (kept.empty()) return;
    Evict(t, kept.size(), step);
    const int64_t granted =
        std::min<int64_t>(kept.size(), t->index->free.size());
    // A product, not a quotient: a division a cell costs more than the
    // rest of the draw.
    const float inverse_scale = static_cast<float>(
        1.0 / std::sqrt(static_cast<double>(t->dimension)));
    admitted_rows->reserve(granted);
    admitted_keys->reserve(granted);
    const std::vector<int64_t>& free = t->index->free;
    for (int64_t i = 0; i < granted; ++i) {
      if (i + kAhead < granted) {
        t->index->rows.Prefetch(keys[kept[i + kAhead]]);
        const int64_t ahead = free[free.size() - 1 - kAhead];
        Fetch(t->pool + ahead * t->dimension);
        Fetch(t->ids + ahead);
        Fetch(t->last_seen + ahead);
        Fetch(t->counts + ahead);
      }
      const size_t k = kept[i];
      const int64_t key = keys[k];
      const int64_t row = t->index->free.back();
      t->index->free.pop_back();
      t->index->rows.Put(key, row);
      t->ids[row] = key;
      t->last_seen[row] = step;
      t->counts[row] = totals[k];
      t->fresh[row] = true;
      if (hash_vectors_) {
        // dynamic.initial_vectors: uniform in +-1/sqrt(dimension) from the
        // id's hash, bit for bit.
        const int64_t base = mixes_->Mix(key, 0);
        float* vector = t->pool + row * t->dimension;
        for (int64_t c = 0; c < t->dimension; ++c) {
          const int64_t cell = static_cast<int64_t>(
              static_cast<uint64_t>(base) + static_cast<uint64_t>(c));
          const uint64_t bits = static_cast<uint64_t>(mixes_->Mix(cell, 1)) >> 40;
          const float unit = static_cast<float>(bits) / 16777216.0f;
          vector[c] = (2.0f * unit - 1.0f) * inverse_scale;
        }
      }
      for (int64_t j = first[k]; j < first[k + 1]; ++j) {
        rows(missing[j].position) = row;
      }
      admitted_rows->push_back(row);
      admitted_keys->push_back(key);
    }
  }

  int64_t min_count_;
  int64_t steps_to_live_;
  int64_t expiry_period_;
  bool lfu_;
  int64_t evict_fraction_;
  bool hash_vectors_;
  bool with_sketch_;
  std::unique_ptr<Mixes> mixes_;
};

// The vectors of a training lookup's rows, zeros where a row is -1, and
// where the rows are (positions, rows) for the gradient, which dynamic.py
// registers: one kernel where a gather and a scatter, and their gradients'
// shape arithmetic, were a dozen.
class ReadOp : public OpKernel {
 public:
  explicit ReadOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    Var* pool = nullptr;
    OP_REQUIRES_OK(ctx, tensorflow::LookupResource(
                            ctx, tensorflow::HandleFromInput(ctx, 0), &pool));
    tensorflow::core::ScopedUnref unref(pool);
    tensorflow::tf_shared_lock lock(*pool->mu());
    const Tensor& values = *pool->tensor();
    OP_REQUIRES(ctx, values.dtype() == tensorflow::DT_FLOAT && values.dims() == 2,
                InvalidArgument("dynamic table: a pool of ",
                                tensorflow::DataTypeString(values.dtype()),
                                " and shape ", values.shape().DebugString(),
                                ", float32 [rows, dimension] wanted"));
    const int64_t capacity = values.dim_size(0);
    const int64_t dimension = values.dim_size(1);
    const auto rows = ctx->input(1).flat<int64_t>();
    const int64_t n = rows.size();
    int64_t found = 0;
    for (int64_t i = 0; i < n; ++i) {
      OP_REQUIRES(ctx, rows(i) < capacity,
                  InvalidArgument("dynamic table: row ", rows(i), " of ",
                                  capacity));
      found += rows(i) >= 0;
    }
    Tensor* vectors = nullptr;
    Tensor* at = nullptr;
    Tensor* found_rows = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n, dimension}),
                                             &vectors));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({found}), &at));
    OP_REQUIRES_OK(ctx,
                   ctx->allocate_output(2, TensorShape({found}), &found_rows));
    const float* from = values.flat<float>().data();
    float* to = vectors->flat<float>().data();
    auto at_ = at->flat<int64_t>();
    auto found_rows_ = found_rows->flat<int64_t>();
    for (int64_t i = 0, k = 0; i < n; ++i) {
      float* vector = to + i * dimension;
      if (rows(i) < 0) {
        std::fill(vector, vector + dimension, 0.0f);
        continue;
      }
      std::copy(from + rows(i) * dimension, from + (rows(i) + 1) * dimension,
                vector);
      at_(k) = i;
      found_rows_(k++) = rows(i);
    }
  }
};

// Puts the optimizer's slots of the rows admitted since its last update
// back to their initial values, before it applies to them, and clears
// `fresh`: dynamic.reset_slots_on_admission.
class ResetFreshOp : public OpKernel {
 public:
  explicit ResetFreshOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("values", &values_));
  }

  void Compute(OpKernelContext* ctx) override {
    // Inputs: 0 fresh, 1 .. N slots, N + 1 indices.
    const int slots = values_.size();
    std::vector<int> inputs;
    for (int i = 0; i <= slots; ++i) inputs.push_back(i);
    LockedVariables vars;
    OP_REQUIRES_OK(ctx, vars.Take(ctx, inputs));
    for (int i = 1; i <= slots; ++i) {
      OP_REQUIRES(ctx, vars[i]->dtype() == tensorflow::DT_FLOAT,
                  InvalidArgument("dynamic table: a slot of ",
                                  tensorflow::DataTypeString(vars[i]->dtype()),
                                  ", float32 wanted"));
    }
    bool* fresh = vars[0]->flat<bool>().data();
    const int64_t rows = vars[0]->NumElements();
    std::vector<float*> slot_rows;
    std::vector<int64_t> widths;
    for (int i = 1; i <= slots; ++i) {
      slot_rows.push_back(vars[i]->flat<float>().data());
      widths.push_back(rows == 0 ? 0 : vars[i]->NumElements() / rows);
    }
    const auto indices = ctx->input(slots + 1).flat<int64_t>();
    const int64_t n = indices.size();
    for (int64_t k = 0; k < n; ++k) {
      const int64_t row = indices(k);
      OP_REQUIRES(ctx, row >= 0 && row < rows,
                  InvalidArgument("dynamic table: row ", row, " of ", rows));
    }
    // Every row's slots are fetched ahead, fresh or not: the optimizer's
    // update reads them next, and a test of `fresh` there would mispredict.
    for (int64_t k = 0; k < n; ++k) {
      if (k + kAhead < n) {
        const int64_t ahead = indices(k + kAhead);
        for (int i = 0; i < slots; ++i) Fetch(slot_rows[i] + ahead * widths[i]);
      }
      const int64_t row = indices(k);
      if (!fresh[row]) continue;
      for (int i = 0; i < slots; ++i) {
        float* slot = slot_rows[i] + row * widths[i];
        std::fill(slot, slot + widths[i], values_[i]);
      }
      fresh[row] = false;
    }
  }

 private:
  std::vector<float> values_;
};

REGISTER_OP("EsDynamicTableIndex")
    .Output("index: resource")
    .Attr("container: string = ''")
    .Attr("shared_name: string = ''")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape);

REGISTER_OP("EsDynamicTableTrainRows")
    .Input("index: resource")
    .Input("ids: resource")
    .Input("last_seen: resource")
    .Input("counts: resource")
    .Input("fresh: resource")
    .Input("pool: resource")
    .Input("evicted: resource")
    .Input("built: resource")
    .Input("sketch: resource")
    .Input("keys: int64")
    .Input("key_counts: int64")
    .Input("step: int64")
    .Output("rows: int64")
    .Output("admitted_rows: int64")
    .Output("admitted_keys: int64")
    .Attr("min_count: int")
    .Attr("steps_to_live: int")
    .Attr("expiry_period: int")
    .Attr("lfu: bool")
    .Attr("evict_fraction: int")
    .Attr("hash_vectors: bool")
    .Attr("with_sketch: bool")
    .Attr("multipliers: list(int)")
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(9));
      c->set_output(1, c->Vector(c->UnknownDim()));
      c->set_output(2, c->Vector(c->UnknownDim()));
      return ::tensorflow::OkStatus();
    });

REGISTER_OP("EsDynamicTableRead")
    .Input("pool: resource")
    .Input("rows: int64")
    .Output("vectors: float")
    .Output("at: int64")
    .Output("found_rows: int64")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->Matrix(c->Dim(c->input(1), 0), c->UnknownDim()));
      c->set_output(1, c->Vector(c->UnknownDim()));
      c->set_output(2, c->Vector(c->UnknownDim()));
      return ::tensorflow::OkStatus();
    });

REGISTER_OP("EsDynamicTableResetFresh")
    .Input("fresh: resource")
    .Input("slots: N * resource")
    .Input("indices: int64")
    .Attr("N: int >= 0")
    .Attr("values: list(float)")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs);

REGISTER_KERNEL_BUILDER(Name("EsDynamicTableResetFresh").Device(DEVICE_CPU),
                        ResetFreshOp);
REGISTER_KERNEL_BUILDER(Name("EsDynamicTableIndex").Device(DEVICE_CPU),
                        tensorflow::ResourceHandleOp<Index>);
REGISTER_KERNEL_BUILDER(Name("EsDynamicTableTrainRows").Device(DEVICE_CPU),
                        TrainRowsOp);
REGISTER_KERNEL_BUILDER(Name("EsDynamicTableRead").Device(DEVICE_CPU), ReadOp);

}  // namespace
}  // namespace estimator_scale
