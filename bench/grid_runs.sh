# Sourced by the grid scripts (demo_grid.sh, wan_example_grid.sh): one run per seed and thread count.
# run_grid "SEEDS" "THREADS" CMD [ARGS...]: calls CMD ARGS... SEED THREADS for each; one-thread runs
# go two at a time (one per core of the 2-core machines these grids are for), others one at a time.
run_grid() {
  local seeds=($1) threads_list="$2" threads seed pids i
  shift 2
  for threads in $threads_list; do
    if [ "$threads" = 1 ]; then
      for ((i = 0; i < ${#seeds[@]}; i += 2)); do
        "$@" "${seeds[$i]}" 1 & pids="$!"
        if [ $((i + 1)) -lt ${#seeds[@]} ]; then "$@" "${seeds[$((i + 1))]}" 1 & pids="$pids $!"; fi
        for p in $pids; do wait "$p"; done
      done
    else
      for seed in "${seeds[@]}"; do "$@" "$seed" "$threads"; done
    fi
  done
}
