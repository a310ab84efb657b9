// mpi_test_environment.h — for *_mpi_test.cpp files (run under mpirun): one MPI session and one
// world communicator per process, created before the first test and finalised after the last;
// only rank 0 prints (the other ranks' results show in their exit codes). A test file registers
// it with ::testing::AddGlobalTestEnvironment(new MpiEnvironment) and reaches the world through
// MpiEnvironment::world().
#pragma once

#include <chrono>
#include <memory>

#include <gtest/gtest.h>

#include "core/runtime/mpi_communicator.h"
#include "core/runtime/mpi_session.h"

namespace cpbench {

class MpiEnvironment : public ::testing::Environment {
 public:
  explicit MpiEnvironment(std::chrono::milliseconds timeout = std::chrono::seconds(30)) : timeout_(timeout) {}
  void SetUp() override {
    session_ = std::make_unique<MpiSession>();
    ASSERT_TRUE(session_->status()) << session_->status().error_str();
    auto w = MpiCommunicator::world(timeout_);
    ASSERT_TRUE(w) << w.error_str();
    world_ = std::move(*w);
    if (world_->rank() != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
    }
  }
  void TearDown() override {
    world_.reset();
    session_.reset();
  }
  static MpiCommunicator& world() { return *world_; }

 private:
  std::chrono::milliseconds timeout_;
  std::unique_ptr<MpiSession> session_;
  static inline std::unique_ptr<MpiCommunicator> world_;
};

}  // namespace cpbench
