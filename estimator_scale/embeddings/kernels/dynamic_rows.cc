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

#include "absl/container/flat_hash_map.h"
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

// The id -> row index and the stack of free rows (its top at the back).
class Index : public ResourceBase {
 public:
  std::string DebugString() const override { return "dynamic table index"; }
  tensorflow::mutex mu;
  absl::flat_hash_map<int64_t, int64_t> rows;
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
  index->rows.clear();
  index->rows.reserve(rows);
  index->free.clear();
  for (int64_t r = rows - 1; r >= 0; --r) {
    if (ids[r] >= 0) {
      index->rows[ids[r]] = r;
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
    for (int64_t r : freed) index->rows.prefetch(ids[r]);
    for (int64_t r : freed) {
      index->rows.erase(ids[r]);
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

    // The distinct keys, their totals, and each key's place among them.
    const int64_t n = keys.size();
    absl::flat_hash_map<int64_t, int64_t> place;
    place.reserve(n);
    std::vector<int64_t> distinct, totals, where(n);
    for (int64_t i = 0; i < n; ++i) {
      auto [it, added] = place.try_emplace(keys(i), distinct.size());
      if (added) {
        distinct.push_back(keys(i));
        totals.push_back(0);
      }
      totals[it->second] += key_counts(i);
      where[i] = it->second;
    }
    // Where each distinct key's row is: the index is far larger than a
    // cache, so every key's slot is fetched before any is read. A row
    // looked up is stamped with this update at once, which keeps it out of
    // this update's eviction.
    for (int64_t key : distinct) index->rows.prefetch(key);
    std::vector<int64_t> rows(distinct.size(), kFree);
    std::vector<int64_t> missing;
    for (size_t k = 0; k < distinct.size(); ++k) {
      if (distinct[k] < 0) continue;  // a missing value: never a row
      auto found = index->rows.find(distinct[k]);
      if (found != index->rows.end()) {
        rows[k] = found->second;
        t.last_seen[rows[k]] = step;
        t.counts[rows[k]] += totals[k];
      } else {
        missing.push_back(k);
      }
    }
    std::vector<int64_t> admitted_rows, admitted_keys;
    if (!missing.empty()) {
      Admit(&t, distinct, totals, missing, step, &rows, &admitted_rows,
            &admitted_keys);
    }

    vars[5]->scalar<int64_t>()() += t.evicted;

    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &out));
    auto out_rows = out->flat<int64_t>();
    for (int64_t i = 0; i < n; ++i) out_rows(i) = rows[where[i]];
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
  // The rows to free are the `count` lowest by (score, row). Their
  // threshold score comes from a histogram of the scores just above the
  // lowest, in three passes over the rows in order; where it lies beyond
  // the histogram's reach, the candidates are partially sorted instead.
  void Evict(Table* t, int64_t wanted, int64_t step) {
    const int64_t short_by = wanted - static_cast<int64_t>(t->index->free.size());
    if (short_by <= 0) return;
    const int64_t* score = lfu_ ? t->counts : t->last_seen;
    const int64_t* last_seen = t->last_seen;
    auto candidate = [&](int64_t r) { return last_seen[r] < step; };
    int64_t lowest = kNever;
    int64_t candidates = 0;
    for (int64_t r = 0; r < t->rows; ++r) {
      if (candidate(r)) {
        lowest = std::min(lowest, score[r]);
        ++candidates;
      }
    }
    const int64_t count = std::min<int64_t>(
        std::max(short_by, t->rows / evict_fraction_), candidates);
    if (count <= 0) return;
    constexpr int64_t kReach = 4096;
    std::vector<int32_t> histogram(kReach + 1, 0);
    for (int64_t r = 0; r < t->rows; ++r) {
      if (candidate(r)) ++histogram[std::min(score[r] - lowest, kReach)];
    }
    int64_t below = 0;
    int64_t offset = 0;
    while (offset < kReach && below + histogram[offset] < count) {
      below += histogram[offset++];
    }
    std::vector<int64_t> freed;
    freed.reserve(count);
    if (offset < kReach) {
      const int64_t threshold = lowest + offset;
      int64_t at_threshold = count - below;
      for (int64_t r = 0; r < t->rows; ++r) {
        if (!candidate(r)) continue;
        if (score[r] < threshold) {
          freed.push_back(r);
        } else if (score[r] == threshold && at_threshold > 0) {
          freed.push_back(r);
          --at_threshold;
        }
      }
    }
    auto lower = [score](int64_t a, int64_t b) {
      return score[a] != score[b] ? score[a] < score[b] : a < b;
    };
    if (offset == kReach) {
      for (int64_t r = 0; r < t->rows; ++r) {
        if (candidate(r)) freed.push_back(r);
      }
      std::nth_element(freed.begin(), freed.begin() + count, freed.end(),
                       lower);
      freed.resize(count);
    }
    std::sort(freed.begin(), freed.end(), lower);
    std::reverse(freed.begin(), freed.end());
    t->Free(freed);
  }

  void Admit(Table* t, const std::vector<int64_t>& distinct,
             const std::vector<int64_t>& totals,
             std::vector<int64_t> missing, int64_t step,
             std::vector<int64_t>* rows, std::vector<int64_t>* admitted_rows,
             std::vector<int64_t>* admitted_keys) {
    std::sort(missing.begin(), missing.end(), [&](int64_t a, int64_t b) {
      return distinct[a] < distinct[b];
    });
    if (t->sketch != nullptr) {
      std::vector<int64_t> keys, counts;
      for (int64_t k : missing) {
        keys.push_back(distinct[k]);
        counts.push_back(totals[k]);
      }
      std::vector<bool> admissible = Admissible(t, keys, counts);
      std::vector<int64_t> kept;
      for (size_t i = 0; i < missing.size(); ++i) {
        if (admissible[i]) kept.push_back(missing[i]);
      }
      missing.swap(kept);
    }
    if (missing.empty()) return;
    Evict(t, missing.size(), step);
    const int64_t granted =
        std::min<int64_t>(missing.size(), t->index->free.size());
    const float scale = static_cast<float>(std::sqrt(
        static_cast<double>(t->dimension)));
    for (int64_t i = 0; i < granted; ++i) {
      const int64_t key = distinct[missing[i]];
      const int64_t row = t->index->free.back();
      t->index->free.pop_back();
      t->index->rows[key] = row;
      t->ids[row] = key;
      t->last_seen[row] = step;
      t->counts[row] = totals[missing[i]];
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
          vector[c] = (2.0f * unit - 1.0f) / scale;
        }
      }
      (*rows)[missing[i]] = row;
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
    for (int64_t k = 0; k < indices.size(); ++k) {
      const int64_t row = indices(k);
      OP_REQUIRES(ctx, row >= 0 && row < rows,
                  InvalidArgument("dynamic table: row ", row, " of ", rows));
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
