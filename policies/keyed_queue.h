// KeyedQueue: the storage of every queue order that sorts by a key (priority, sjf,
// predicted-sjf, edf, mlfq; policies/queue_order.cc, policies/queue_order_mlfq.cc).
//
// A queue ordered by a key computed when a request is pushed, ties broken by request id (a total
// order, so the order never depends on addresses). O(log n) for every operation. Because the key
// is recomputed on every push, a preempted request returns at the place its current progress
// earns it. Keyed orders rank (WaitingQueue::ranks): a running request compares by the key it
// would get if pushed now.
#pragma once

#include <memory>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/waiting_queue.h"

namespace servelab {

// The key of a queued request is remembered, so erase() finds it even if the request's fields
// changed after it was pushed, and subclasses may move it (rekey) at the start of a step.
template <class Key, class KeyFn>
class KeyedQueue : public WaitingQueue {
 public:
  KeyedQueue(const char* name, KeyFn key_fn) : name_(name), key_fn_(std::move(key_fn)) {}

  const char* name() const override { return name_; }
  void push_back(Request* r) override { insert(r); }
  void push_front(Request* r) override { insert(r); }  // no head: re-insert by key
  Request* front() const override { return set_.begin()->r; }
  void pop_front() override {
    keys_.erase(set_.begin()->r->id());
    set_.erase(set_.begin());
  }
  bool empty() const override { return set_.empty(); }
  std::size_t size() const override { return set_.size(); }
  bool erase(Request* r) override {
    const auto it = keys_.find(r->id());
    if (it == keys_.end()) return false;
    set_.erase(Entry{it->second, r->id(), r});
    keys_.erase(it);
    return true;
  }
  std::vector<Request*> snapshot() const override {
    std::vector<Request*> out;
    out.reserve(set_.size());
    for (const Entry& e : set_) out.push_back(e.r);
    return out;
  }
  // A queued request ranks by its key in the queue (which reorder() may have changed), any
  // other by the key it would get if pushed now.
  bool ranks() const override { return true; }
  bool ranks_before(const Request& a, const Request& b) const override {
    const Key ka = key_of(a);
    const Key kb = key_of(b);
    return ka < kb || (!(kb < ka) && a.id() < b.id());
  }

 protected:
  struct Entry {
    Key key;
    RequestId id;
    Request* r;  // payload only: never compared
    bool operator<(const Entry& o) const { return std::tie(key, id) < std::tie(o.key, o.id); }
  };
  using Iterator = typename std::set<Entry>::iterator;

  // Moves the entry at `it` to `key`; returns the entry after `it` in the old order.
  Iterator rekey(Iterator it, Key key) {
    Request* r = it->r;
    it = set_.erase(it);
    set_.insert(Entry{key, r->id(), r});
    keys_[r->id()] = std::move(key);
    return it;
  }
  Iterator begin() { return set_.begin(); }
  Iterator end() { return set_.end(); }
  // The entry of queued request `id`. REQUIRES: it is queued.
  Iterator find(RequestId id) { return set_.find(Entry{keys_.find(id)->second, id, nullptr}); }
  // The key `r` has in the queue if queued, else running_key(r).
  Key key_of(const Request& r) const {
    const auto it = keys_.find(r.id());
    return it != keys_.end() ? it->second : running_key(r);
  }
  // The rank of a request that is not queued: the key it would get if pushed now, unless the
  // order moves keys at the start of a step (then the key it would have after that).
  virtual Key running_key(const Request& r) const { return key_fn_(r); }

 private:
  void insert(Request* r) {
    Key key = key_fn_(*r);
    set_.insert(Entry{key, r->id(), r});
    keys_.emplace(r->id(), std::move(key));
  }

  const char* name_;
  KeyFn key_fn_;
  std::set<Entry> set_;
  std::unordered_map<RequestId, Key> keys_;  // lookups only, never iterated
};

// The KeyedQueue named `name` on the key `fn` (const Request&) -> Key.
template <class KeyFn>
std::unique_ptr<WaitingQueue> make_keyed(const char* name, KeyFn fn) {
  using Key = decltype(fn(std::declval<const Request&>()));
  return std::make_unique<KeyedQueue<Key, KeyFn>>(name, std::move(fn));
}

}  // namespace servelab
