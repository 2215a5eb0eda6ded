// LoRA adapter slots (core/lora_slots.h) and their memory (serving/kv_capacity.h
// lora_slot_bytes): vLLM allocates max_loras slots of max_lora_rank with the model, so they leave
// that much less device memory for the KV cache, in the simulator's arithmetic and in the CUDA
// engine (which allocates them before it sizes its cache; GpuExecutor.LoraSlots* hold it there).
#include "core/lora_slots.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/lora_kernel.h"
#include "serving/config_node.h"
#include "serving/hardware_config.h"
#include "serving/home.h"
#include "serving/kv_capacity.h"
#include "serving/model_config.h"
#include "serving/parallel_config.h"

namespace servelab {
namespace {

std::vector<LoraSlots::Placement> Place(LoraSlots& s, std::vector<std::uint32_t> ids) {
  return s.place(ids);
}

TEST(LoraSlots, ResidentAdaptersStayAndTheLeastRecentlyUsedIsEvicted) {
  LoraSlots s(3);
  // Empty slots fill lowest first.
  auto p = Place(s, {7, 9});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].slot, 0);
  EXPECT_TRUE(p[0].load);
  EXPECT_EQ(p[1].slot, 1);
  EXPECT_TRUE(p[1].load);
  // A resident keeps its slot without a load; a new one takes the free slot 2.
  p = Place(s, {9, 4});
  EXPECT_EQ(p[0].slot, 1);
  EXPECT_FALSE(p[0].load);
  EXPECT_EQ(p[1].slot, 2);
  EXPECT_TRUE(p[1].load);
  // Full: 7 (last used at call 1) goes, not 9 or 4 (call 2).
  p = Place(s, {5});
  EXPECT_EQ(p[0].slot, 0);
  EXPECT_TRUE(p[0].load);
  EXPECT_EQ(s.slot_of(7), -1);
  EXPECT_EQ(s.adapter_in(0), 5u);
  // 4 and 5 stay; 8 evicts 9, the only adapter outside the step.
  p = Place(s, {4, 5, 8});
  EXPECT_FALSE(p[0].load);
  EXPECT_FALSE(p[1].load);
  EXPECT_EQ(p[2].slot, 1);
  EXPECT_TRUE(p[2].load);
  EXPECT_EQ(s.slot_of(9), -1);
  EXPECT_EQ(s.loads(), 5);
  // A step's residents are placed first, so a newcomer listed before them cannot evict them.
  p = Place(s, {6, 4, 8});
  EXPECT_EQ(p[0].slot, 0);  // 5 was the only adapter outside the step
  EXPECT_EQ(s.slot_of(4), 2);
  EXPECT_EQ(s.slot_of(8), 1);
  EXPECT_EQ(s.slot_of(5), -1);
  // Adapters last used by the same step: the lowest slot's goes first.
  LoraSlots t(2);
  Place(t, {1, 2});
  EXPECT_EQ(Place(t, {3})[0].slot, 0);
  EXPECT_EQ(t.slot_of(2), 1);
}

TEST(LoraSlots, RefusesMoreAdaptersThanSlotsRepeatsAndTheBaseModel) {
  EXPECT_THROW(LoraSlots(0), std::invalid_argument);
  LoraSlots s(2);
  Place(s, {1});
  EXPECT_THROW(Place(s, {2, 3, 4}), std::invalid_argument);
  EXPECT_THROW(Place(s, {2, 2}), std::invalid_argument);
  EXPECT_THROW(Place(s, {0}), std::invalid_argument);
  // Nothing changed.
  EXPECT_EQ(s.slot_of(1), 0);
  EXPECT_EQ(s.adapter_in(1), 0u);
  EXPECT_EQ(s.loads(), 1);
  EXPECT_TRUE(Place(s, {}).empty());
}

// The same sequence of steps gives the same placements (the executor's adapters, and so its
// results, depend on nothing else).
TEST(LoraSlots, PlacementsDependOnlyOnTheCalls) {
  const std::vector<std::vector<std::uint32_t>> steps = {{1, 2}, {3}, {2, 4}, {5, 1}, {3, 4}, {2}};
  std::vector<std::int32_t> first, second;
  for (std::vector<std::int32_t>* out : {&first, &second}) {
    LoraSlots s(3);
    for (const auto& ids : steps) {
      for (const LoraSlots::Placement& p : s.place(ids)) out->push_back(p.slot * 2 + p.load);
    }
  }
  EXPECT_EQ(first, second);
}

std::string Catalog() { return servelab_home().string() + "/experiments/catalog"; }
ModelConfig Model(const char* name) { return load_model(name, Catalog()); }

// One slot's bytes: what the CUDA engine packs for one adapter at that rank (kernels/lora_kernel.h,
// bf16), so the simulator and the engine take the same memory from the cache.
TEST(LoraSlotBytes, EqualsTheEnginesPackedAdapterAndFollowsVllmsSharding) {
  const ModelConfig m = Model("Llama-3-8B");
  // 32 layers x 16 x (7 x 4096 + 2 x 4096 + 2 x 1024 + 3 x 14336) x 2 bytes = 83,886,080.
  EXPECT_EQ(lora_slot_bytes(m, m.num_layers, 16), 83'886'080);
  for (const std::int32_t rank : {1, 8, 16, 64, 512}) {
    const kernels::LoraShape shape =
        kernels::llama_lora_shape(m.hidden_size, static_cast<std::int32_t>(m.q_size()),
                                  static_cast<std::int32_t>(m.kv_size()), m.intermediate_size);
    EXPECT_EQ(shape.elements(rank, m.num_layers) * 2, lora_slot_bytes(m, m.num_layers, rank))
        << "rank " << rank;
  }
  // Tensor parallelism over 2: A of o and down and B of q, k, v, gate and up are halved, the rest
  // stays whole: 16 x (7 x 4096 + 2 x 2048 + 2 x 512 + 3 x 7168) x 2 per layer.
  const ModelConfig half = tensor_shard(m, 2);
  EXPECT_EQ(lora_slot_bytes(half, 1, 16), 16 * (7 * 4096 + 2 * 2048 + 2 * 512 + 3 * 7168) * 2);
  EXPECT_EQ(lora_slot_bytes(m, 0, 16), 0);
}

TEST(LoraSlotBytes, SlotsLeaveLessForTheKvCache) {
  const ModelConfig m = Model("Llama-3-8B");
  const HardwareConfig h100 = load_hardware("H100-SXM", Catalog());
  KvCapacityOptions o;
  o.activation_reserve_bytes = std::int64_t{2} << 30;
  const KvCapacity plain = compute_kv_capacity(m, h100, o);
  EXPECT_EQ(plain.lora_bytes, 0);
  o.lora_slots = 8;
  o.lora_rank = 16;
  const KvCapacity lora = compute_kv_capacity(m, h100, o);
  EXPECT_EQ(lora.lora_bytes, 8 * 83'886'080LL);
  EXPECT_EQ(lora.kv_bytes, plain.kv_bytes - lora.lora_bytes);
  EXPECT_EQ(lora.num_gpu_blocks, lora.kv_bytes / lora.block_bytes);
  EXPECT_LT(lora.num_gpu_blocks, plain.num_gpu_blocks);
  // Under tensor x pipeline parallelism each GPU holds its stage's layers' share.
  o.tensor_parallel = 2;
  o.pipeline_parallel = 2;
  const KvCapacity split = compute_kv_capacity(m, h100, o);
  EXPECT_EQ(split.lora_bytes, 8 * lora_slot_bytes(tensor_shard(m, 2), 16, 16));
  o.lora_slots = 0;
  EXPECT_EQ(compute_kv_capacity(m, h100, o).kv_bytes, split.kv_bytes + split.lora_bytes);
  // Slots that leave no room: the message names the slots and serving.lora.
  o.tensor_parallel = o.pipeline_parallel = 1;
  o.lora_slots = 1024;
  try {
    compute_kv_capacity(m, h100, o);
    ADD_FAILURE() << "1024 slots of rank 16 fit an H100";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("LoRA slots"), std::string::npos) << what;
    EXPECT_NE(what.find("1024 of rank 16: serving.lora"), std::string::npos) << what;
  }
  o.lora_slots = 2;
  o.lora_rank = 0;
  EXPECT_THROW(compute_kv_capacity(m, h100, o), ConfigError);
  o.lora_slots = -1;
  o.lora_rank = 16;
  EXPECT_THROW(compute_kv_capacity(m, h100, o), ConfigError);
}

}  // namespace
}  // namespace servelab
