// The world-of-one communicator and the argument checks every backend shares: mismatched sizes and dtypes, GPU or
// strided tensors, integer averages and bad roots are errors naming the collective; a world of one copies.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dist/collective_schedule.h"
#include "dist/communicator.h"
#include "testing/test_util.h"

namespace vlm::dist {
namespace {

Tensor iota(int64_t n, DType dtype, double start = 0.0) {
  return testing::filled({n}, dtype, [start](int64_t i) { return start + static_cast<double>(i); });
}

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return false;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (a.item_f32(i) != b.item_f32(i)) return false;
  return true;
}

TEST(LocalCommunicator, EveryCollectiveIsTheRanksOwnData) {
  const std::unique_ptr<Communicator> comm = make_local_communicator();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_STREQ(comm->backend(), "local");
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i32, DType::i64, DType::u8}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor original = iota(37, dt, 3.0);
    Tensor t = original.clone();
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
      if (dt == DType::u8) break;  // bytes are gathered, not reduced (an error, tested below)
      ASSERT_TRUE(comm->all_reduce(t, op).ok());
      EXPECT_TRUE(same_values(t, original)) << reduce_op_name(op);
    }
    Tensor gathered = Tensor::zeros({37}, dt);
    ASSERT_TRUE(comm->all_gather(gathered, original).ok());
    EXPECT_TRUE(same_values(gathered, original));
    Tensor scattered = Tensor::zeros({37}, dt);
    if (dt != DType::u8) {
      ASSERT_TRUE(comm->reduce_scatter(scattered, original, ReduceOp::sum).ok());
      EXPECT_TRUE(same_values(scattered, original));
    }
    ASSERT_TRUE(comm->broadcast(t, 0).ok());
    EXPECT_TRUE(same_values(t, original));
  }
  Tensor f = iota(5, DType::f32);
  ASSERT_TRUE(comm->all_reduce(f, ReduceOp::avg).ok());
  EXPECT_TRUE(same_values(f, iota(5, DType::f32)));
  const Expected<double> value = all_reduce_value(*comm, 2.5, ReduceOp::sum);
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, 2.5);
  EXPECT_TRUE(comm->barrier().ok());
  Tensor empty = Tensor::empty({0}, DType::f32);
  EXPECT_TRUE(comm->all_reduce(empty, ReduceOp::sum).ok());
}

TEST(LocalCommunicator, BadArgumentsAreErrorsNamingTheCollective) {
  const std::unique_ptr<Communicator> comm = make_local_communicator();
  Tensor f32 = iota(8, DType::f32), other_size = iota(9, DType::f32), bf16 = iota(8, DType::bf16);
  Tensor i32 = iota(8, DType::i32), u8 = Tensor::zeros({8}, DType::u8), undefined;
  const Tensor strided = iota(16, DType::f32).view({4, 4}).slice(1, 0, 2);
  auto expect_error = [](const Status& s, StatusCode code, const char* mentions) {
    ASSERT_FALSE(s.ok()) << mentions;
    EXPECT_EQ(s.code(), code) << s.message();
    EXPECT_NE(s.message().find(mentions), std::string::npos) << s.message();
  };
  expect_error(comm->all_gather(other_size, f32), StatusCode::invalid_argument, "all_gather");
  expect_error(comm->reduce_scatter(other_size, f32, ReduceOp::sum), StatusCode::invalid_argument, "reduce_scatter");
  expect_error(comm->all_gather(bf16, f32), StatusCode::invalid_argument, "differ in dtype");
  Tensor f16 = Tensor::zeros({8}, DType::f16), u8_in = Tensor::zeros({8}, DType::u8);
  expect_error(comm->all_reduce(f16, ReduceOp::sum), StatusCode::invalid_argument, "f16");
  expect_error(comm->all_reduce(u8, ReduceOp::sum), StatusCode::invalid_argument, "gathered, not reduced");
  expect_error(comm->reduce_scatter(u8, u8_in, ReduceOp::max), StatusCode::invalid_argument, "gathered, not reduced");
  expect_error(comm->all_reduce(undefined, ReduceOp::sum), StatusCode::invalid_argument, "undefined");
  expect_error(comm->all_reduce(i32, ReduceOp::avg), StatusCode::invalid_argument, "avg of integer");
  expect_error(comm->broadcast(f32, 1), StatusCode::invalid_argument, "root 1");
  Tensor s = strided;
  expect_error(comm->all_reduce(s, ReduceOp::sum), StatusCode::invalid_argument, "not contiguous");
}

TEST(LocalCommunicator, GathersStringsOfAnyLength) {
  const std::unique_ptr<Communicator> comm = make_local_communicator();
  for (const std::string& s : {std::string(), std::string("state"), std::string(100000, '\0') + "end"}) {
    const Expected<std::vector<std::string>> all = all_gather_strings(*comm, s);
    ASSERT_TRUE(all.ok()) << all.status().message();
    ASSERT_EQ(all->size(), 1u);
    EXPECT_EQ((*all)[0], s);
  }
}

TEST(LocalCommunicator, GatherIsTheRanksOwnDataOnRootOnly) {
  const std::unique_ptr<Communicator> comm = make_local_communicator();
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i32, DType::i64, DType::u8}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor original = iota(19, dt, 1.0);
    Tensor out = Tensor::zeros({19}, dt);
    ASSERT_TRUE(comm->gather(out, original, 0).ok());
    EXPECT_TRUE(same_values(out, original));
  }
  Tensor out = Tensor::zeros({4}, DType::f32), undefined;
  const Status wrong_size = comm->gather(out, iota(3, DType::f32), 0);
  EXPECT_EQ(wrong_size.code(), StatusCode::invalid_argument);
  EXPECT_NE(wrong_size.message().find("gather: out"), std::string::npos) << wrong_size.message();
  EXPECT_EQ(comm->gather(undefined, iota(3, DType::f32), 0).code(), StatusCode::invalid_argument);  // root's out
  const Status bad_root = comm->gather(out, iota(4, DType::f32), 1);
  EXPECT_NE(bad_root.message().find("gather: root 1"), std::string::npos) << bad_root.message();
}

TEST(LocalCommunicator, GathersStringsToRootInRounds) {
  const std::unique_ptr<Communicator> comm = make_local_communicator();
  // round_bytes 7: several rounds, and a last one shorter than the rest.
  const std::string with_nul = std::string(100, 'x') + std::string(1, '\0') + "end";
  for (const std::string& s : {std::string(), std::string("abc"), with_nul}) {
    for (size_t round : {size_t{7}, size_t{1000}}) {
      const Expected<std::vector<std::string>> all = gather_strings(*comm, s, 0, round);
      ASSERT_TRUE(all.ok()) << all.status().message();
      ASSERT_EQ(all->size(), 1u);
      EXPECT_EQ((*all)[0], s);
    }
  }
  EXPECT_EQ(gather_strings(*comm, "x", 1).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(gather_strings(*comm, "x", 0, 0).status().code(), StatusCode::invalid_argument);
  std::string text = "kept";
  ASSERT_TRUE(broadcast_string(*comm, text, 0).ok());
  EXPECT_EQ(text, "kept");
  std::string empty;
  ASSERT_TRUE(broadcast_string(*comm, empty, 0).ok());
  EXPECT_EQ(empty, "");
  EXPECT_EQ(broadcast_string(*comm, text, -1).code(), StatusCode::invalid_argument);
}

TEST(Communicator, OneRankLaunchGetsTheLocalBackend) {
  LaunchInfo info;  // a world of one
  Expected<std::unique_ptr<Communicator>> comm = make_communicator(info);
  ASSERT_TRUE(comm.ok()) << comm.status().message();
  EXPECT_STREQ((*comm)->backend(), "local");
}


TEST(LocalCommunicator, AsynchronousFormsAreDoneAtOnce) {
  const std::unique_ptr<Communicator> comm = make_local_communicator();
  const Tensor in = iota(9, DType::bf16, 1.0);
  Tensor out = Tensor::zeros({9}, DType::bf16);
  Expected<WorkHandle> work = comm->all_gather_async(out, in);
  ASSERT_TRUE(work.ok()) << work.status().message();
  EXPECT_TRUE((*work)->is_done());
  EXPECT_TRUE((*work)->wait().ok());
  EXPECT_TRUE(same_values(out, in));
  Tensor wrong = Tensor::zeros({8}, DType::bf16);
  const Expected<WorkHandle> refused = comm->reduce_scatter_async(wrong, in, ReduceOp::sum);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("reduce_scatter"), std::string::npos);
  const Status failed = Status(StatusCode::internal, "broken link");
  EXPECT_EQ(finished_work(failed)->wait().message(), "broken link");
}

TEST(MakeCommunicator, PicksTheBackendOfTheLaunch) {
  LaunchInfo alone;
  Expected<std::unique_ptr<Communicator>> comm = make_communicator(alone);
  ASSERT_TRUE(comm.ok());
  EXPECT_STREQ((*comm)->backend(), "local");
  // torchrun-style launches (and vlm launch) rendezvous through the TCP store for NCCL; CPU tensors need MPI.
  LaunchInfo torchrun;
  torchrun.size = 2;
  torchrun.launcher = "torchrun";
  comm = make_communicator(torchrun);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::unsupported);
  EXPECT_NE(comm.status().message().find("launch with mpirun or srun"), std::string::npos) << comm.status().message();
  EXPECT_FALSE(make_communicator(torchrun, Device::cpu()).ok());
  if (!built_with_nccl()) {
    comm = make_communicator(alone, Device::cuda(0));
    ASSERT_FALSE(comm.ok());
    EXPECT_NE(comm.status().message().find("built without CUDA"), std::string::npos) << comm.status().message();
  }
}

TEST(CollectiveSchedule, JoinsRunThenInIssueOrderAndKeepTheNewest) {
  const std::unique_ptr<Communicator> comm = make_local_communicator();
  CollectiveSchedule schedule;
  schedule.trace(true);
  std::vector<std::string> ran;
  for (int key : {3, 1, 2}) {
    Tensor out = Tensor::zeros({4}, DType::f32);
    Expected<WorkHandle> w = comm->all_gather_async(out, iota(4, DType::f32, key), schedule.compute());
    ASSERT_TRUE(w.ok());
    std::vector<WorkHandle> works;
    works.push_back(std::move(*w));
    schedule.add("reduce", key, std::move(works), [&ran, key, out] {
      ran.push_back(str("reduce ", key, " first ", out.item_f32(0)));  // the result is there when `then` runs
    });
  }
  schedule.add("gather", 1, {});
  EXPECT_TRUE(schedule.pending("reduce", 1));
  EXPECT_EQ(schedule.count("reduce"), 3u);
  EXPECT_EQ(schedule.count(), 4u);
  ASSERT_TRUE(schedule.join_all("reduce", 1).ok());  // all but the newest, oldest first
  EXPECT_EQ(ran, (std::vector<std::string>{"reduce 3 first 3", "reduce 1 first 1"}));
  EXPECT_TRUE(schedule.pending("reduce", 2));
  schedule.note("use", 7);
  ASSERT_TRUE(schedule.join("gather", 1).ok());
  ASSERT_TRUE(schedule.join("gather", 1).ok());  // not pending: nothing
  ASSERT_TRUE(schedule.join_all().ok());
  EXPECT_EQ(schedule.count(), 0u);
  std::vector<std::string> trace;
  for (const ScheduleEvent& e : schedule.events()) trace.push_back(describe(e));
  EXPECT_EQ(trace, (std::vector<std::string>{"issued reduce 3", "issued reduce 1", "issued reduce 2", "issued gather 1",
                                             "joined reduce 3", "joined reduce 1", "note use 7", "joined gather 1",
                                             "joined reduce 2"}));
  EXPECT_DEATH(
      {
        schedule.add("gather", 5, {});
        schedule.add("gather", 5, {});
      },
      "issued again before it was joined");
}

TEST(CollectiveSchedule, AFailedCollectiveSkipsItsThenAndIsReturned) {
  CollectiveSchedule schedule;
  bool ran = false;
  std::vector<WorkHandle> works;
  works.push_back(finished_work(internal_error("rank 1 went away")));
  schedule.add("reduce", 0, std::move(works), [&] { ran = true; });
  const Status s = schedule.join("reduce", 0);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 1 went away"), std::string::npos);
  EXPECT_FALSE(ran);
}

TEST(LocalCommunicator, TakesTensorsOnTheDeviceItWasMadeFor) {
  const std::unique_ptr<Communicator> comm = make_local_communicator(Device::cuda(0));
  EXPECT_EQ(comm->device(), Device::cuda(0));
  EXPECT_TRUE(comm->serves(Device::cpu()));  // a world of one copies on any device
  Tensor out = Tensor::zeros({2, 3}, DType::f32);
  ASSERT_TRUE(comm->all_gather(out, iota(6, DType::f32, 1.0)).ok());  // flat copies of any shape
  EXPECT_EQ(out.item_f32(5), 6.f);
}

TEST(PaddedShardSize, IsTheCeilingOfAnEvenSplit) {
  EXPECT_EQ(padded_shard_size(0, 4), 0);
  EXPECT_EQ(padded_shard_size(1, 4), 1);
  EXPECT_EQ(padded_shard_size(8, 4), 2);
  EXPECT_EQ(padded_shard_size(1001, 3), 334);
  EXPECT_EQ(padded_shard_size(7, 1), 7);
}

}  // namespace
}  // namespace vlm::dist
