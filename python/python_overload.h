// Overload control written in Python: PythonAdmission (core/admission_policy.h) and
// PythonLengthCap (core/length_cap.h), the adapters behind servelab.register_admission and
// servelab.register_length_cap, and servelab.AdmissionLoad, the load both are shown.
//
// The scheduler asks them in add_request() for each arrival it would otherwise queue (not for
// requests it rejects outright, nor for those another replica hands over). The callable gets the
// arriving request (a servelab.RouteRequest: a copy of its spec and the hashes of its full
// prompt blocks), the load (a servelab.AdmissionLoad: now_ns, waiting, running, waiting_tokens,
// prefill_tokens_per_s) and, when the plugin declares parameters, a dict of their values:
//   - an admission rule returns a str: "" admits the request, anything else sheds it and is its
//     finish_reason (requests.csv `reason`);
//   - a length cap returns an int: the request's max_output_tokens leaves it alone, a smaller
//     value >= 1 caps it.
// Anything else (another type, a cap above max_output_tokens or below 1) and any exception the
// callable raises throw PythonPolicyError naming the plugin; the scheduler then owns nothing of
// the request (the run stops). Contract, as for the built-in rules: a function of the request and
// the load only (one object serves every replica of a cluster, and is called with the GIL taken).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "core/admission_policy.h"
#include "core/length_cap.h"
#include "python/python_policy.h"

namespace servelab::python {

// The registered callable with its parameter values (a dict, or None when the plugin declares
// none) and the scheduler's block size (for the request's block hashes): what both adapters ask
// about one arrival. REQUIRES: the GIL to construct; destruction takes it.
class ArrivalCall {
 public:
  ArrivalCall(std::shared_ptr<const PythonPolicy> policy, pybind11::object params,
              std::int32_t block_size);
  ~ArrivalCall();
  ArrivalCall(const ArrivalCall&) = delete;
  ArrivalCall& operator=(const ArrivalCall&) = delete;

  const PythonPolicy& policy() const { return *policy_; }
  // The callable's answer for `spec` under `load`. REQUIRES: the GIL. Throws PythonPolicyError
  // naming the plugin when the callable raises.
  pybind11::object ask(const RequestSpec& spec, const AdmissionLoad& load) const;

 private:
  std::shared_ptr<const PythonPolicy> policy_;
  pybind11::object params_;
  std::int32_t block_size_;
};

class PythonAdmission final : public AdmissionPolicy {
 public:
  // REQUIRES: the GIL.
  PythonAdmission(std::shared_ptr<const PythonPolicy> policy, pybind11::object params,
                  std::int32_t block_size)
      : call_(std::move(policy), std::move(params), block_size) {}

  std::string_view name() const override { return call_.policy().name(); }
  std::string shed_reason(const RequestSpec& spec, const AdmissionLoad& load) const override;

 private:
  ArrivalCall call_;
};

class PythonLengthCap final : public LengthCap {
 public:
  // REQUIRES: the GIL.
  PythonLengthCap(std::shared_ptr<const PythonPolicy> policy, pybind11::object params,
                  std::int32_t block_size)
      : call_(std::move(policy), std::move(params), block_size) {}

  std::string_view name() const override { return call_.policy().name(); }
  std::int32_t cap(const RequestSpec& spec, const AdmissionLoad& load) const override;

 private:
  ArrivalCall call_;
};

// Registers servelab.AdmissionLoad.
void bind_admission_load(pybind11::module_& m);

}  // namespace servelab::python
