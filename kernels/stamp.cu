// One timestamp per launch: where and when this point of a stream was reached.
//
// Launched with one thread (grid 1, block 1) on the stream being timed, so it
// runs after everything enqueued before it on that stream and before
// everything after. Slot i of `slots` (int64, shape [n_slots, 3]) receives
//   [0] %globaltimer  - device-wide nanoseconds, comparable across SMs and
//                       streams (it is what CUDA events sample too);
//   [1] clock64()     - the SM's cycle counter: finer than globaltimer but
//                       only comparable between stamps taken on the same SM;
//   [2] %smid         - that SM, so a reader can tell which clocks compare.
// Unwritten slots keep whatever the host put there (cutimeline fills -1).

static __device__ __forceinline__ unsigned long long ctl_globaltimer()
{
    unsigned long long t;
    // volatile: every call must really read the timer; without it the
    // compiler may merge or hoist reads.
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __device__ __forceinline__ unsigned int ctl_smid()
{
    unsigned int sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    return sm;
}

extern "C" __global__ void ctl_stamp(long long* slots, int n_slots, int slot)
{
    // The host checks the slot too; this guard keeps a bad index from
    // silently overwriting memory that belongs to someone else.
    if (slot < 0 || slot >= n_slots) return;
    long long* s = slots + 3 * (long long)slot;
    s[0] = (long long)ctl_globaltimer();
    s[1] = clock64();
    s[2] = (long long)ctl_smid();
}
