// The modes by name. An explicit list rather than self-registering statics: the modes live in a static
// library, whose objects nothing else references would be left out of the link.
#include "app/modes/mode.h"

namespace moc {

extern const Mode kTrainMode, kDecodeMode, kEvalMode, kFfnTrainMode, kFfnDecodeMode, kTopkMode;

const std::vector<const Mode*>& all_modes() {
  static const std::vector<const Mode*> modes{&kTrainMode, &kDecodeMode, &kEvalMode, &kFfnTrainMode,
                                                 &kFfnDecodeMode, &kTopkMode};
  return modes;
}

const Mode* find_mode(std::string_view name) {
  for (const Mode* m : all_modes())
    if (m->name == name) return m;
  return nullptr;
}

}  // namespace moc
