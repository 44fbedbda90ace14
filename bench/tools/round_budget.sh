# Sourced by bench/micro/knob_ab.sh and ab_decode.sh: their rounds under BUDGET_S (seconds; optional, 0 or unset: no
# limit). A round starts only where it would end inside the budget, judged by the longest round so far; the rounds
# that ran are summarized as always -- a device call's time limit then costs rounds, not the whole A/B
# (bench/micro/NOTES.md, twenty-ninth session).
# budget_check NAME: refuses a BUDGET_S that is not a number of seconds (before any work).
budget_check() {
  [[ "${BUDGET_S:-0}" =~ ^[0-9]+$ ]] && return 0
  echo "$1: BUDGET_S '${BUDGET_S}' is not a number of seconds" >&2
  return 2
}
# budget_round_start R ROUNDS: 0 when round R may start (and times it), else says why not and returns 1.
budget_round_start() {
  [ "$1" -eq 1 ] && { BUDGET_T0=$(date +%s); BUDGET_LONGEST=0; }
  local now
  now=$(date +%s)
  if [ "${BUDGET_S:-0}" -gt 0 ] && [ "$1" -gt 1 ] && [ $((now - BUDGET_T0 + BUDGET_LONGEST)) -gt "$BUDGET_S" ]; then
    echo "stopped before round $1 of $2: it would end past BUDGET_S=$BUDGET_S s (longest round $BUDGET_LONGEST s)"
    return 1
  fi
  BUDGET_TR=$now
}
# budget_round_end: after each round.
budget_round_end() {
  local d=$(($(date +%s) - BUDGET_TR))
  [ "$d" -gt "$BUDGET_LONGEST" ] && BUDGET_LONGEST=$d
  return 0
}
