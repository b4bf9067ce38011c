// The halo oracle on device buffers, through the public API, for every GPU backend: owned cells
// hold a function of the global index, every halo cell is checked after forward exchanges, and
// every owned cell after reverse exchanges (sum and max) against a brute-force sum over all
// ranks' halo copies. Data is uploaded and downloaded with asynchronous copies on the same
// stream as the exchange, with no host synchronisation in between, so the test also checks the
// stream ordering: a pack that ran before the upload, or an unpack after the download, fails.

#include "gpu_support.hpp"

#include "exec/cuda/mpi_cuda_support.hpp"

#include "common/half.hpp"
#include <halox/halox.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <tuple>

using namespace halox;

namespace {

// ---- cases --------------------------------------------------------------------------------

struct gpu_case {
  char const* name;
  std::vector<index_t> shape;
  std::vector<dim_options> opts;
  std::vector<dtype> types; // one tensor each, all in one plan
  int pad;                  // extra elements per innermost row of the local buffers
  bool fill;                // boundary_fill::constant
};

dim_options halo2(int lo, int hi, bool periodic) {
  dim_options o;
  o.halo_lo = lo;
  o.halo_hi = hi;
  o.periodic = periodic;
  return o;
}

std::vector<gpu_case> const& cases() {
  static std::vector<gpu_case> const c = {
      {"periodic2d_f32",
       {12, 10},
       {halo2(1, 1, true), halo2(2, 2, true)},
       {dtype::float32},
       0,
       false},
      {"mixed3d_f64_f16",
       {8, 6, 10},
       {halo2(1, 1, true), halo2(1, 1, false), halo2(2, 1, false)},
       {dtype::float64, dtype::float16},
       1,
       true},
      {"wide1d_i32_u8", {9}, {halo2(3, 2, true)}, {dtype::int32, dtype::uint8}, 0, false},
      {"padded2d_bf16_i64",
       {7, 16},
       {halo2(2, 2, false), halo2(1, 1, true)},
       {dtype::bfloat16, dtype::int64},
       3,
       true},
      {"corners3d_f32",
       {6, 6, 6},
       {halo2(1, 1, true), halo2(1, 1, true), halo2(1, 1, true)},
       {dtype::float32},
       0,
       false},
  };
  return c;
}

constexpr double sentinel = 0.0;   // initial halo value (owned values are >= 1)
constexpr double fill_value = 200; // exact in every dtype

// ---- values -------------------------------------------------------------------------------

void encode(dtype t, double v, unsigned char* out) {
  auto put = [&](auto x) { std::memcpy(out, &x, sizeof x); };
  switch (t) {
  case dtype::float32: put(static_cast<float>(v)); break;
  case dtype::float64: put(v); break;
  case dtype::int32: put(static_cast<std::int32_t>(v)); break;
  case dtype::int64: put(static_cast<std::int64_t>(v)); break;
  case dtype::uint8: put(static_cast<std::uint8_t>(v)); break;
  case dtype::float16: put(detail::float_to_half(static_cast<float>(v))); break;
  case dtype::bfloat16: put(detail::float_to_bf16(static_cast<float>(v))); break;
  }
}

double decode(dtype t, unsigned char const* in) {
  auto get = [&](auto x) {
    std::memcpy(&x, in, sizeof x);
    return x;
  };
  switch (t) {
  case dtype::float32: return get(float{});
  case dtype::float64: return get(double{});
  case dtype::int32: return get(std::int32_t{});
  case dtype::int64: return static_cast<double>(get(std::int64_t{}));
  case dtype::uint8: return get(std::uint8_t{});
  case dtype::float16: return detail::half_to_float(get(std::uint16_t{}));
  case dtype::bfloat16: return detail::bf16_to_float(get(std::uint16_t{}));
  }
  return 0;
}

bool small_type(dtype t) {
  return t == dtype::float16 || t == dtype::bfloat16 || t == dtype::uint8;
}

index_t linear(std::vector<index_t> const& g, std::vector<index_t> const& shape) {
  index_t l = 0;
  for (std::size_t d = 0; d < g.size(); ++d) l = l * shape[d] + g[d];
  return l;
}

// Forward: owned value of global index g of tensor k (exact in its dtype).
double owned_value(dtype t, int k, index_t lin) {
  return small_type(t) ? static_cast<double>((lin * 7 + k * 3) % 97 + 1)
                       : static_cast<double>(lin * 3 + k + 1);
}
// Reverse: small values, so every sum is exact in every dtype.
double reverse_owned(index_t lin) { return static_cast<double>(lin % 8 + 1); }
double reverse_halo(int rank, index_t lin_unwrapped) {
  return static_cast<double>((lin_unwrapped * 5 + rank * 3) % 4 + 1);
}

// Global index of every allocated cell of `rank` (unwrapped), with its local element offset when
// `desc` is the calling rank's descriptor.
template <class F> void each_allocated(distribution const& dist, int rank, F&& f) {
  box const a = dist.allocated_box(rank);
  if (a.empty()) return;
  std::vector<index_t> g(a.lo, a.lo + a.nd);
  while (true) {
    f(g);
    int d = a.nd - 1;
    while (d >= 0 && ++g[static_cast<std::size_t>(d)] == a.hi[d]) {
      g[static_cast<std::size_t>(d)] = a.lo[d];
      --d;
    }
    if (d < 0) return;
  }
}

bool inside(box const& b, std::vector<index_t> const& g) {
  for (int d = 0; d < b.nd; ++d)
    if (g[static_cast<std::size_t>(d)] < b.lo[d] || g[static_cast<std::size_t>(d)] >= b.hi[d])
      return false;
  return true;
}

// Wraps g into the domain; false when it lies beyond a non-periodic boundary.
bool wrap(distribution const& dist, std::vector<index_t> const& g, std::vector<index_t>& w) {
  w = g;
  for (int d = 0; d < dist.ndim(); ++d) {
    index_t const n = dist.shape()[static_cast<std::size_t>(d)];
    index_t& x = w[static_cast<std::size_t>(d)];
    if (x >= 0 && x < n) continue;
    if (!dist.options(d).periodic) return false;
    x = ((x % n) + n) % n;
  }
  return true;
}

// ---- device buffers -----------------------------------------------------------------------

struct stream_owner {
  cudaStream_t s = nullptr;
  stream_owner() { cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
  ~stream_owner() { cudaStreamDestroy(s); }
};

struct tensor_buffers {
  std::size_t bytes = 0;
  void* dev = nullptr;
  unsigned char* pinned = nullptr; // upload and download staging
  explicit tensor_buffers(std::size_t n) : bytes(n) {
    if (n == 0) return;
    EXPECT_EQ(cudaMalloc(&dev, n), cudaSuccess);
    EXPECT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), n), cudaSuccess);
  }
  ~tensor_buffers() {
    cudaFree(dev);
    cudaFreeHost(pinned);
  }
  tensor_buffers(tensor_buffers const&) = delete;
  tensor_buffers& operator=(tensor_buffers const&) = delete;
};

// ---- the test -----------------------------------------------------------------------------

class GpuHalo : public testing::TestWithParam<std::tuple<backend, int>> {};

std::string skip_reason(backend b) {
  std::string why = gpu_test::device_problem();
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (why.empty() && b == backend::nccl && size > gpu_test::device_count())
    why = "NCCL needs one GPU per rank: " + std::to_string(size) + " ranks share " +
          std::to_string(gpu_test::device_count()) + " visible device(s)";
  if (why.empty() && size > 1 &&
      (b == backend::cuda_aware_mpi || b == backend::device_mpi_datatype) &&
      detail::mpi_cuda_support() == 0)
    why = std::string("MPI is not CUDA-aware (MPIX query says no), so ") + to_string(b) +
          " cannot run at " + std::to_string(size) +
          " ranks; set HALOX_CUDA_AWARE_MPI=1 to "
          "force it";
  return gpu_test::any_rank(why);
}

TEST_P(GpuHalo, ForwardAndReverseMatchOracle) {
  backend const b = std::get<0>(GetParam());
  gpu_case const& c = cases()[static_cast<std::size_t>(std::get<1>(GetParam()))];
  if (auto const why = skip_reason(b); !why.empty()) GTEST_SKIP() << why;
  gpu_test::select_device();

  auto grid = process_grid::create(MPI_COMM_WORLD, std::vector<int>(c.shape.size(), 0), c.shape);
  int const rank = grid.rank();
  std::vector<tensor_desc> descs;
  for (dtype t : c.types) {
    tensor_desc plain(grid, c.shape, t, c.opts);
    std::vector<index_t> st;
    if (c.pad > 0 && plain.local_elements() > 0) {
      auto const& ls = plain.local_shape();
      st.assign(ls.size(), 1);
      for (std::size_t d = ls.size() - 1; d-- > 0;)
        st[d] = st[d + 1] * (ls[d + 1] + (d + 1 == ls.size() - 1 ? c.pad : 0));
    }
    descs.emplace_back(grid, c.shape, t, c.opts, st);
  }
  halo_options o;
  o.method = b;
  o.memory = memory_space::device;
  o.boundary = c.fill ? boundary_fill::constant : boundary_fill::untouched;
  o.fill_value = fill_value;
  halo_plan plan(descs, o);
  ASSERT_EQ(plan.selected_backend(), b);

  stream_owner st, other;
  std::vector<std::unique_ptr<tensor_buffers>> bufs;
  std::vector<tensor_view> views;
  for (auto const& d : descs) {
    bufs.push_back(std::make_unique<tensor_buffers>(d.local_bytes()));
    views.emplace_back(d, bufs.back()->dev, d.local_bytes());
  }
  auto upload = [&] {
    for (auto const& tb : bufs)
      if (tb->bytes > 0) {
        ASSERT_EQ(cudaMemsetAsync(tb->dev, 0x5a, tb->bytes, st.s), cudaSuccess);
        ASSERT_EQ(cudaMemcpyAsync(tb->dev, tb->pinned, tb->bytes, cudaMemcpyHostToDevice, st.s),
                  cudaSuccess);
      }
  };
  auto download = [&](cudaStream_t s) {
    for (auto const& tb : bufs) {
      if (tb->bytes > 0) {
        ASSERT_EQ(cudaMemcpyAsync(tb->pinned, tb->dev, tb->bytes, cudaMemcpyDeviceToHost, s),
                  cudaSuccess);
      }
    }
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  };
  // Visits (tensor, element pointer in the host copy, global index) of every allocated cell.
  auto each_cell = [&](auto&& f) {
    for (std::size_t k = 0; k < descs.size(); ++k) {
      auto const& d = descs[k];
      std::size_t const e = size_of(d.type());
      each_allocated(d.dist(), rank, [&](std::vector<index_t> const& g) {
        f(k, bufs[k]->pinned + static_cast<std::size_t>(d.local_offset(g)) * e, g);
      });
    }
  };

  // Forward, twice (plans are reused); the second time waits on another stream.
  for (int pass = 0; pass < 2; ++pass) {
    each_cell([&](std::size_t k, unsigned char* p, std::vector<index_t> const& g) {
      auto const& d = descs[k];
      bool const own = inside(d.owned_box(), g);
      encode(d.type(),
             own ? owned_value(d.type(), static_cast<int>(k), linear(g, c.shape)) : sentinel, p);
    });
    upload();
    plan.start(views, st.s);
    plan.wait(pass == 0 ? st.s : other.s);
    download(pass == 0 ? st.s : other.s);
    std::size_t bad = 0;
    each_cell([&](std::size_t k, unsigned char* p, std::vector<index_t> const& g) {
      auto const& d = descs[k];
      std::vector<index_t> w;
      double const expect = wrap(d.dist(), g, w)
                                ? owned_value(d.type(), static_cast<int>(k), linear(w, c.shape))
                                : (c.fill ? fill_value : sentinel);
      double const got = decode(d.type(), p);
      if (got != expect && bad++ < 5)
        ADD_FAILURE() << to_string(b) << " " << c.name << " forward pass " << pass << " tensor "
                      << k << " at global index (" << testing::PrintToString(g) << "): got " << got
                      << ", expected " << expect;
    });
    ASSERT_EQ(bad, 0u);
  }

  // Reverse: sum, then max.
  for (reduce_op op : {reduce_op::sum, reduce_op::max}) {
    std::vector<std::map<std::vector<index_t>, double>> expect(descs.size());
    for (std::size_t k = 0; k < descs.size(); ++k) {
      auto const& dist = descs[k].dist();
      for (int r = 0; r < grid.size(); ++r) {
        box const own = dist.owned_box(r);
        each_allocated(dist, r, [&](std::vector<index_t> const& g) {
          if (inside(own, g)) {
            double const v = reverse_owned(linear(g, c.shape));
            auto it = expect[k].find(g);
            if (it == expect[k].end())
              expect[k][g] = v;
            else
              it->second = op == reduce_op::sum ? it->second + v : std::max(it->second, v);
          }
        });
      }
      for (int r = 0; r < grid.size(); ++r) {
        box const own = dist.owned_box(r);
        each_allocated(dist, r, [&](std::vector<index_t> const& g) {
          std::vector<index_t> w;
          if (inside(own, g) || !wrap(dist, g, w)) return;
          double const v = reverse_halo(r, linear(g, c.shape) + 1000);
          double& x = expect[k][w];
          x = op == reduce_op::sum ? x + v : std::max(x, v);
        });
      }
    }
    each_cell([&](std::size_t k, unsigned char* p, std::vector<index_t> const& g) {
      bool const own = inside(descs[k].owned_box(), g);
      double const v =
          own ? reverse_owned(linear(g, c.shape)) : reverse_halo(rank, linear(g, c.shape) + 1000);
      encode(descs[k].type(), v, p);
    });
    upload();
    plan.execute_reverse(views, op, st.s);
    download(st.s);
    std::size_t bad = 0;
    each_cell([&](std::size_t k, unsigned char* p, std::vector<index_t> const& g) {
      auto const& d = descs[k];
      bool const own = inside(d.owned_box(), g);
      double const want = own ? expect[k][g] : reverse_halo(rank, linear(g, c.shape) + 1000);
      double const got = decode(d.type(), p);
      if (got != want && bad++ < 5)
        ADD_FAILURE() << to_string(b) << " " << c.name << " reverse "
                      << (op == reduce_op::sum ? "sum" : "max") << " tensor " << k
                      << (own ? " owned" : " halo") << " cell (" << testing::PrintToString(g)
                      << "): got " << got << ", expected " << want;
    });
    ASSERT_EQ(bad, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(DeviceBackends, GpuHalo,
                         testing::Combine(testing::ValuesIn(device_backends()),
                                          testing::Range(0, static_cast<int>(cases().size()))),
                         [](auto const& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" +
                                  cases()[static_cast<std::size_t>(std::get<1>(info.param))].name;
                         });

} // namespace
