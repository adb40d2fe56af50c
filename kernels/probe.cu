// How finely does %globaltimer tick? One thread reads it in a tight loop and
// records each change it sees.
//
// The timer does not advance every nanosecond: depending on GPU and driver it
// updates every 32 ns, every ~1 us, or somewhere between, and the step bounds
// how precisely a stamp or a spin can be placed. For each of the first
// `n_steps` changes the kernel writes
//   steps[k] - the increment (new value minus previous, signed, so a timer
//              going backwards would show as a negative step);
//   reads[k] - how many reads it took to see that change. reads[k] == 1 means
//              the loop could not keep up with the timer, so steps[k] is the
//              cost of one read rather than the update step. reads[0] is
//              partial: the loop started somewhere inside the first step.
// It stops after `max_reads` reads in all, so a timer that never advances
// cannot hang the GPU. summary (int64[3]) gets
//   [0] number of steps recorded, [1] smallest step (or -1 if none),
//   [2] reads made in all.

static __device__ __forceinline__ unsigned long long ctl_globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void ctl_probe(long long* steps, long long* reads,
                                     int n_steps, long long max_reads,
                                     long long* summary)
{
    unsigned long long prev = ctl_globaltimer();
    long long total = 0;
    long long since = 0;
    long long min_step = 0x7fffffffffffffffLL;  // above any real step
    int k = 0;
    while (k < n_steps && total < max_reads) {
        const unsigned long long now = ctl_globaltimer();
        ++total;
        ++since;
        if (now != prev) {
            const long long step = (long long)(now - prev);
            steps[k] = step;
            reads[k] = since;
            if (step < min_step) min_step = step;
            ++k;
            since = 0;
            prev = now;
        }
    }
    summary[0] = k;
    summary[1] = k > 0 ? min_step : -1;
    summary[2] = total;
}
