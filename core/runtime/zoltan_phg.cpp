// zoltan_phg.cpp — Zoltan PHG on MPI_COMM_SELF: the query callbacks read a PhgProblem.
#include "core/runtime/zoltan_phg.h"

#include <mpi.h>
#include <zoltan.h>

#include <mutex>
#include <string>
#include <utility>

#include "core/runtime/mpi_session.h"

// Zoltan's random-number state is global and advances with every partition; resetting it before
// each call makes a partition a function of its hypergraph alone (exported by libtrilinos_zoltan,
// declared in its zz_rand.h, which Debian does not install).
extern "C" void Zoltan_Srand(unsigned int seed, unsigned int* state);

namespace cpbench {
namespace {

std::mutex zoltan_mutex;

const PhgProblem& problem_of(void* data) { return *static_cast<const PhgProblem*>(data); }
int32_t nets_of(const PhgProblem& p) { return static_cast<int32_t>(p.net_weight.size()); }

int num_obj(void* data, int* ierr) {
  *ierr = ZOLTAN_OK;
  return static_cast<int>(problem_of(data).vertex_weight.size());
}

void obj_list(void* data, int, int, ZOLTAN_ID_PTR gids, ZOLTAN_ID_PTR lids, int wdim, float* wgts, int* ierr) {
  const PhgProblem& p = problem_of(data);
  for (size_t v = 0; v < p.vertex_weight.size(); ++v) {
    gids[v] = static_cast<ZOLTAN_ID_TYPE>(v);
    lids[v] = static_cast<ZOLTAN_ID_TYPE>(v);
    if (wdim > 0) wgts[v] = p.vertex_weight[v];
  }
  *ierr = ZOLTAN_OK;
}

void hg_size(void* data, int* num_lists, int* num_pins, int* format, int* ierr) {
  const PhgProblem& p = problem_of(data);
  *num_lists = nets_of(p);
  *num_pins = static_cast<int>(p.pins.size());
  *format = ZOLTAN_COMPRESSED_EDGE;
  *ierr = ZOLTAN_OK;
}

void hg_cs(void* data, int, int nets, int npins, int, ZOLTAN_ID_PTR net_gids, int* net_ptr, ZOLTAN_ID_PTR pin_gids,
           int* ierr) {
  const PhgProblem& p = problem_of(data);
  for (int e = 0; e < nets; ++e) {
    net_gids[e] = static_cast<ZOLTAN_ID_TYPE>(e);
    net_ptr[e] = static_cast<int>(p.net_begin[e]);
  }
  for (int j = 0; j < npins; ++j) pin_gids[j] = static_cast<ZOLTAN_ID_TYPE>(p.pins[j]);
  *ierr = ZOLTAN_OK;
}

void hg_size_edge_weights(void* data, int* num_edges, int* ierr) {
  *num_edges = nets_of(problem_of(data));
  *ierr = ZOLTAN_OK;
}

void hg_edge_weights(void* data, int, int num_lid, int nets, int, ZOLTAN_ID_PTR net_gids, ZOLTAN_ID_PTR net_lids,
                     float* weights, int* ierr) {
  const PhgProblem& p = problem_of(data);
  for (int e = 0; e < nets; ++e) {
    net_gids[e] = static_cast<ZOLTAN_ID_TYPE>(e);
    if (num_lid > 0) net_lids[e] = static_cast<ZOLTAN_ID_TYPE>(e);
    weights[e] = static_cast<float>(p.net_weight[e]);
  }
  *ierr = ZOLTAN_OK;
}

}  // namespace

Expected<std::vector<int32_t>> zoltan_phg(const PhgProblem& problem) {
  if (auto s = init_zoltan(); !s) return s.errors();
  std::vector<int32_t> part(problem.vertex_weight.size(), 0);
  std::lock_guard<std::mutex> lock(zoltan_mutex);
  float version = 0;
  if (Zoltan_Initialize(0, nullptr, &version) != ZOLTAN_OK) return Error{"", "", "Zoltan_Initialize failed"};
  Zoltan_Srand(problem.seed, nullptr);
  Zoltan_Struct* zz = Zoltan_Create(MPI_COMM_SELF);
  const std::string parts = std::to_string(problem.parts);
  const std::string tol = std::to_string(problem.imbalance_tol);
  const std::pair<const char*, const char*> params[] = {
      {"DEBUG_LEVEL", "0"},          {"LB_METHOD", "HYPERGRAPH"},       {"HYPERGRAPH_PACKAGE", "PHG"},
      {"LB_APPROACH", "PARTITION"},  {"PHG_CUT_OBJECTIVE", "CONNECTIVITY"}, {"NUM_GID_ENTRIES", "1"},
      {"NUM_LID_ENTRIES", "1"},      {"OBJ_WEIGHT_DIM", "1"},           {"EDGE_WEIGHT_DIM", "1"},
      {"RETURN_LISTS", "PARTS"},     {"NUM_GLOBAL_PARTS", parts.c_str()}, {"IMBALANCE_TOL", tol.c_str()},
      {"PHG_OUTPUT_LEVEL", "0"},     {"CHECK_HYPERGRAPH", "0"},         {"PHG_EDGE_WEIGHT_OPERATION", "ADD"},
  };
  for (const auto& [k, v] : params) Zoltan_Set_Param(zz, k, v);
  void* data = const_cast<PhgProblem*>(&problem);  // the callbacks only read it
  Zoltan_Set_Num_Obj_Fn(zz, num_obj, data);
  Zoltan_Set_Obj_List_Fn(zz, obj_list, data);
  Zoltan_Set_HG_Size_CS_Fn(zz, hg_size, data);
  Zoltan_Set_HG_CS_Fn(zz, hg_cs, data);
  Zoltan_Set_HG_Size_Edge_Wts_Fn(zz, hg_size_edge_weights, data);
  Zoltan_Set_HG_Edge_Wts_Fn(zz, hg_edge_weights, data);
  int changes = 0, gid_entries = 0, lid_entries = 0, num_import = 0, num_export = 0;
  ZOLTAN_ID_PTR import_gids = nullptr, import_lids = nullptr, export_gids = nullptr, export_lids = nullptr;
  int *import_procs = nullptr, *import_parts = nullptr, *export_procs = nullptr, *export_parts = nullptr;
  const int rc = Zoltan_LB_Partition(zz, &changes, &gid_entries, &lid_entries, &num_import, &import_gids, &import_lids,
                                     &import_procs, &import_parts, &num_export, &export_gids, &export_lids, &export_procs,
                                     &export_parts);
  if (rc == ZOLTAN_OK)
    for (int i = 0; i < num_export; ++i) part[export_gids[i]] = export_parts[i];
  Zoltan_LB_Free_Part(&import_gids, &import_lids, &import_procs, &import_parts);
  Zoltan_LB_Free_Part(&export_gids, &export_lids, &export_procs, &export_parts);
  Zoltan_Destroy(&zz);
  if (rc != ZOLTAN_OK) return Error{"", "", "Zoltan_LB_Partition failed (code " + std::to_string(rc) + ")"};
  return part;
}

Status init_zoltan() {
  std::lock_guard<std::mutex> lock(zoltan_mutex);
  static MpiSession session;  // a no-op when MPI is already initialised (mpirun)
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!session.status() || finalized)
    return Error{"", "", "hypergraph partitioning needs MPI (Zoltan runs on MPI_COMM_SELF), which is not available: " +
                             (finalized ? std::string("already finalised") : session.status().error_str())};
  int level = 0, is_main = 0;
  MPI_Query_thread(&level);
  MPI_Is_thread_main(&is_main);
  if (level < MPI_THREAD_MULTIPLE && !is_main)
    return Error{"", "", "hypergraph partitioning from a worker thread needs MPI_THREAD_MULTIPLE; this MPI granted level " +
                             std::to_string(level)};
  return ok_status();
}

}  // namespace cpbench
