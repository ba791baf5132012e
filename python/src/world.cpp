// python/src/world.cpp: the ranks mpirun started, as the module's communicator (maxtext_cpp.mpi_world()). The one
// unit compiled with MPI's headers (python/CMakeLists.txt), as tools/cli_dist.cpp is for the maxtext program; without
// an MPI library module.cpp has a stub that refuses by name.
#include <memory>

#include "maxtext/comm/communicator.hpp"
#include "maxtext/comm/mpi.hpp"

namespace maxtext::python {

std::shared_ptr<comm::Communicator> python_mpi_world() {
  // MPI_Init_thread on the first call (unless mpi4py or the application did it: then that initialisation is used and
  // left to its owner); MPI_Finalize when the process exits, after every Model that holds it is gone.
  static const std::shared_ptr<comm::Communicator> world = std::make_shared<comm::Mpi>();
  return world;
}

}  // namespace maxtext::python
