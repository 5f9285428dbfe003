import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * A sequencer that starts the named files first, in the order given, within each project of
 * `projects` (in that order). Vitest orders files by the durations it cached on an earlier run,
 * and by size when it has none (a fresh clone, CI): a long file that happens to be small would
 * then start last and leave one worker running it alone.
 */
export function longFirst(files: readonly string[], projects: readonly string[] = []): typeof BaseSequencer {
  return class LongFirst extends BaseSequencer {
    override async sort(specs: TestSpecification[]): Promise<TestSpecification[]> {
      const base = await super.sort(specs);
      const rank = (spec: TestSpecification) => {
        const at = files.findIndex((file) => spec.moduleId.endsWith(file));
        return at === -1 ? files.length : at;
      };
      const project = (spec: TestSpecification) => projects.indexOf(spec.project.name);
      return base
        .map((spec, at) => ({ spec, at }))
        .sort((a, b) => project(a.spec) - project(b.spec) || rank(a.spec) - rank(b.spec) || a.at - b.at)
        .map(({ spec }) => spec);
    }
  };
}
