// The main() of the tests that run under mpirun: MPI up before the tests, one report (rank
// 0's; the others check only what they hold), MPI down after.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>

#include "parallel/comm.h"

namespace mx::test {

inline int run_mpi_tests(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto w = mpi_world();
  if (!w.is_ok()) {
    std::fprintf(stderr, "%s\n", w.status().to_string().c_str());
    return 1;
  }
  if ((*w)->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  mpi_finalize();
  return rc;
}

}  // namespace mx::test
