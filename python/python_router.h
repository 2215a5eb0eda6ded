// PythonRouter: a Router (core/router.h) that asks a Python callable, the adapter behind
// servelab.register_router. For each routing decision (the driver asks only when a stage has
// several replicas) the callable gets the request (a servelab.RouteRequest: the spec's attributes
// and the hashes of its full prompt blocks) and the candidate replicas' loads (a list of
// servelab.ReplicaLoad, in cluster order), and the plugin's parameters when it was registered
// with some; it returns the index of the chosen candidate. A class registered as a router is
// instantiated (without arguments) once per router the driver builds, i.e. per run and per stage
// of a P/D cluster, so state kept in the instance (a round-robin position) starts fresh in every
// run. A callable that raises or returns anything but an int in range throws PythonPolicyError
// naming the plugin. Like every router it must be deterministic: decide only from what it was
// shown.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string_view>

#include "core/request.h"
#include "core/router.h"
#include "python/python_policy.h"

namespace servelab::python {

// What a Python router sees of a request: a copy of its spec (valid as long as Python holds it).
struct RouteRequest {
  RequestSpec spec;
  std::int32_t block_size = 16;
};

class PythonRouter final : public Router {
 public:
  // `call` is the callable asked for each decision (the registered function, or the instance
  // of a registered class), `params` the parameter dict or None. REQUIRES: the GIL.
  PythonRouter(std::shared_ptr<const PythonPolicy> policy, pybind11::object call,
               pybind11::object params, std::int32_t block_size);
  ~PythonRouter() override;
  PythonRouter(const PythonRouter&) = delete;
  PythonRouter& operator=(const PythonRouter&) = delete;

  std::string_view name() const override { return policy_->name(); }
  std::size_t route(const RequestSpec& spec, std::span<const ReplicaLoad> candidates) override;

 private:
  std::shared_ptr<const PythonPolicy> policy_;
  pybind11::object call_, params_;
  std::int32_t block_size_;
};

// A router for one run: the registered callable itself, or a fresh instance when it is a class
// (a constructor that raises throws PythonPolicyError). `params` is the parameter dict or None.
// REQUIRES: the GIL.
std::unique_ptr<Router> make_python_router(std::shared_ptr<const PythonPolicy> policy,
                                           pybind11::object params, std::int32_t block_size);

// Registers servelab.RouteRequest and servelab.ReplicaLoad.
void bind_router_views(pybind11::module_& m);

}  // namespace servelab::python
