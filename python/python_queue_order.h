// PythonQueueOrder: a WaitingQueue (core/waiting_queue.h) ordered by a key a Python callable
// computes, the adapter behind servelab.register_queue_order.
//
// The callable gets a servelab.Request (and, when the plugin declares parameters, a dict of
// their values) and returns a number or a tuple of numbers; the queue admits the smallest key
// first, ties ending on the request id, so the order is deterministic whatever the callable.
// The key is computed once when a request enters the queue: at its arrival (push_back) and when
// a preemption returns it (push_front re-inserts by a freshly computed key, as the built-in keyed
// orders do: a preempted request has no "head" in a keyed order). So `lambda r: (r.arrival_ns,)`
// admits in FCFS order. Keys are compared as long doubles (exact for every 64-bit integer).
// A callable that raises or returns anything else throws PythonPolicyError naming the plugin; the
// request is queued (last) first, so the scheduler still owns every request it had.
// It ranks (WaitingQueue::ranks), so `batch: preemptive` takes it: a running request ranks by
// the key the callable gives it when asked (once per comparison: a preemptive step calls it
// O(r log r) times for r running requests), a queued one by the key it was queued with.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/waiting_queue.h"
#include "python/python_policy.h"

namespace servelab::python {

class PythonQueueOrder final : public WaitingQueue {
 public:
  // `params`: the plugin's parameter values (a dict), or None when it declares none.
  // REQUIRES: the GIL.
  PythonQueueOrder(std::shared_ptr<const PythonPolicy> policy, pybind11::object params);
  ~PythonQueueOrder() override;

  const char* name() const override { return policy_->name().c_str(); }
  void push_back(Request* r) override { insert(r); }
  void push_front(Request* r) override { insert(r); }
  Request* front() const override { return order_.begin()->request; }
  void pop_front() override;
  bool empty() const override { return order_.empty(); }
  std::size_t size() const override { return order_.size(); }
  bool erase(Request* r) override;
  std::vector<Request*> snapshot() const override;
  bool ranks() const override { return true; }
  bool ranks_before(const Request& a, const Request& b) const override;

 private:
  struct Entry {
    std::vector<long double> key;
    RequestId id;
    Request* request;
  };
  struct Before {
    bool operator()(const Entry& a, const Entry& b) const {
      if (a.key != b.key) return a.key < b.key;  // lexicographic
      return a.id < b.id;
    }
  };
  void insert(Request* r);
  // The callable's key for `r`. Throws PythonPolicyError naming the plugin when the callable
  // raises or returns anything but a key. Takes the GIL.
  std::vector<long double> compute_key(const Request& r) const;

  std::shared_ptr<const PythonPolicy> policy_;
  pybind11::object params_;
  std::set<Entry, Before> order_;
  // Where each queued request's entry is (looked up, never iterated).
  std::unordered_map<const Request*, std::set<Entry, Before>::iterator> where_;
};

}  // namespace servelab::python
