// halox-verify: validates halox (and the MPI library under it) on this machine or cluster.
//
//   mpiexec -n 4 halox-verify [--backend all|NAME] [--seed S] [--cases N]
//                             [--section all|halo|redistribute] [--max-elements E] [--quiet]
//
// Runs N random cases per backend and section, checks every cell against the serial
// definition, prints one line per backend and section, and ends with the line
// "<passed> passed, <failed> failed". Exit status 0 only when nothing failed.
#include "oracle.hpp"
#include "sections.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

struct cli {
  std::string backend_name = "all";
  std::string section = "all";
  std::uint64_t seed = 1;
  long cases = 100;
  long max_elements = 1500;
  bool quiet = false;
};

[[noreturn]] void usage(int rank, char const* msg) {
  if (rank == 0)
    std::fprintf(stderr,
                 "halox-verify: %s\nusage: mpiexec -n P halox-verify [--backend all|NAME] "
                 "[--seed S] [--cases N] [--section all|halo|redistribute] [--max-elements E] "
                 "[--quiet]\n",
                 msg);
  MPI_Finalize();
  std::exit(2);
}

cli parse(int argc, char** argv, int rank) {
  cli c;
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(rank, ("missing value after " + a).c_str());
      return argv[++i];
    };
    try {
      if (a == "--backend")
        c.backend_name = value();
      else if (a == "--section")
        c.section = value();
      else if (a == "--seed")
        c.seed = std::stoull(value());
      else if (a == "--cases")
        c.cases = std::stol(value());
      else if (a == "--max-elements")
        c.max_elements = std::stol(value());
      else if (a == "--quiet")
        c.quiet = true;
      else if (a == "--help" || a == "-h")
        usage(rank, "help");
      else
        usage(rank, ("unknown option " + a).c_str());
    } catch (std::logic_error const&) {
      usage(rank, ("bad number for " + a).c_str());
    }
  }
  if (c.cases < 0) usage(rank, "--cases must not be negative");
  if (c.max_elements < 1) usage(rank, "--max-elements must be positive");
  if (c.section != "all" && c.section != "halo" && c.section != "redistribute")
    usage(rank, ("unknown section '" + c.section + "'; use all, halo or redistribute").c_str());
  return c;
}

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  cli const c = parse(argc, argv, rank);

  std::vector<halox::backend> backends;
  if (c.backend_name == "all") {
    backends = halox::host_backends();
  } else {
    try {
      backends.push_back(halox::backend_from_string(c.backend_name));
    } catch (halox::error const& e) {
      usage(rank, e.message().c_str());
    }
    if (backends[0] == halox::backend::automatic) {
      // "auto" is verified like any backend: the plan measures and picks one.
    }
  }
  if (rank == 0 && !c.quiet)
    std::printf("halox-verify: %d rank(s), seed %llu, %ld case(s) per backend and section\n%s",
                size, static_cast<unsigned long long>(c.seed), c.cases,
                halox::build_info().c_str());

  halox::verify::totals all;
  for (auto const& section : halox::verify::sections()) {
    if (c.section != "all" && c.section != section.name) continue;
    for (halox::backend b : backends) {
      halox::verify::totals t =
          section.run(b, c.seed, c.cases, static_cast<halox::index_t>(c.max_elements), c.quiet);
      if (rank == 0)
        std::printf("%-13s %-15s %ld passed, %ld failed\n", section.name, halox::to_string(b),
                    t.passed, t.failed);
      all.passed += t.passed;
      all.failed += t.failed;
    }
  }
  if (rank == 0) {
    std::printf("%ld passed, %ld failed\n", all.passed, all.failed);
    std::fflush(stdout);
  }
  MPI_Finalize();
  return all.failed == 0 ? 0 : 1;
}
