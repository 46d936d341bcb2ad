// A driver for Samsung's PIMSimulator (github.com/SAITPublic/PIMSimulator, commit b464dde):
// times one kernel of the reference's baseline mapping on 64 pCH from a fresh simulator, the
// way ../../shared/reference/hbm-pim.md's figures were measured (operands not preloaded: the
// timing does not depend on the values).  Used to check issue 28 item 8's mechanisms; it is
// not part of the build or the tests.
//
// Build (in a PIMSimulator checkout; lib/npy.h needs `#include <iterator>` on newer g++;
// copy system_hbm_64ch.ini to sys64.ini with DEBUG_CMD_TRACE / PRINT_* = false):
//   g++ -O1 -std=c++14 -w -Isrc -Ilib -o sim64 main.cpp src/*.cpp src/tests/PIMKernel.cpp \
//       src/tests/PIMCmdGen.cpp src/tests/KernelAddrGen.cpp -lpthread
// Run:  ./sim64 relu 1048576        -> 2042     ./sim64 readback 16384 1024 -> 565
//       ./sim64 gemv 4096 1024      -> 3662     ./sim64 readback 1024 1024  -> 181
//       ./sim64 relu 4194304        -> 7665     ./sim64 add 1048576         -> 3349
// (SHOW_SIM_OUTPUT=true and DEBUG_CMD_TRACE=true print the command trace per channel.)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "tests/PIMKernel.h"
using namespace DRAMSim;
// usage: sim64 relu|add|gemv|readback <E or M> [N] [trace]
int main(int argc, char** argv) {
    const char* sys = getenv("SYSINI") ? getenv("SYSINI") : "sys64.ini";
    int nch = getenv("NCH") ? atoi(getenv("NCH")) : 64;
    auto mem = make_shared<MultiChannelMemorySystem>("ini/HBM2_samsung_2M_16B_x64.ini", sys, ".", "example_app", 256 * 64 * 2);
    auto kernel = make_shared<PIMKernel>(mem, nch, 1);
    std::string k = argv[1];
    long a = atol(argv[2]);
    if (k == "relu" || k == "add") {
        int bst = a / 16;   // bursts
        kernel->executeEltwise(bst, pimBankType::ALL_BANK, k == "relu" ? KernelType::RELU : KernelType::ADD, 0, 256, 128);
    } else if (k == "gemv" || k == "readback") {
        long N = atol(argv[3]);
        NumpyBurstType w, x;
        w.bShape = {(unsigned long)a, (unsigned long)(N / 16)};
        x.bShape = {1, (unsigned long)(N / 16)};
        x.bData.resize(N / 16 + 64);
        if (k == "gemv") {
            kernel->executeGemv(&w, &x, false);
        } else {
            unsigned end_col = kernel->getResultColGemv(N / 16, a);
            BurstType* res = new BurstType[a];
            kernel->readResult(res, pimBankType::ODD_BANK, a, 0, 0, end_col);
        }
    }
    if (k == "stream") { BurstType* r = new BurstType[a]; kernel->readData(r, a, 0, 0); }
    kernel->runPIM();
    printf("%s %ld cycles=%lu\n", argv[1], a, (unsigned long)kernel->getCycle());
    return 0;
}
