/**
 * How much of the account's regional Lambda concurrency the stack reserves. Reserved concurrency
 * is the only hard ceiling Lambda offers on a synchronously invoked function, and the API's
 * throttle bounds requests per second, not requests in flight (rate × query duration), so the
 * stack caps each function: a query the API admits at once gets a planner, all its tasks and a
 * merge, and the total leaves the account the 100 executions Lambda keeps unreserved
 * (docs/reliability.md, "Concurrency").
 * @module
 */

/** Lambda refuses reservations that leave fewer unreserved executions than this. */
export const UNRESERVED_MINIMUM = 100;

/** Lambda's default concurrency quota per account and region. */
export const DEFAULT_ACCOUNT_CONCURRENCY = 1000;

/** The reservation of each function. */
export interface Reservations {
  readonly planner: number;
  readonly segmentSearch: number;
  readonly merge: number;
  readonly gc: number;
}

export interface ConcurrencyInput {
  /** Queries that may start at once: the API's burst (`throttleBurstLimit`). */
  readonly concurrentQueries: number;
  /** Segment-search tasks per query; the unindexed tail's flat task comes on top. */
  readonly maxTasks: number;
  /** The account's concurrency quota in the region. @default 1000 */
  readonly accountConcurrency?: number;
  /** Reservations given explicitly; the others are derived. */
  readonly explicit?: Partial<Reservations>;
}

/**
 * The reservations: planner = the burst, segment-search = planner × (maxTasks + 1),
 * merge = planner, gc = 1, unless given; then checks that they are consistent and fit.
 * @throws TypeError naming the setting and the arithmetic, for inconsistent or oversized ones.
 */
export function reserveConcurrency(input: ConcurrencyInput): Reservations {
  const account = input.accountConcurrency ?? DEFAULT_ACCOUNT_CONCURRENCY;
  if (!(Number.isInteger(account) && account >= 1)) {
    throw new TypeError(`Expected accountConcurrency to be an integer >= 1, got ${account}`);
  }
  const budget = account - UNRESERVED_MINIMUM;
  if (budget < 1) {
    throw new TypeError(
      `accountConcurrency (${account}) leaves nothing to reserve: Lambda keeps ${UNRESERVED_MINIMUM} executions unreserved. Ask AWS to raise the account's "Concurrent executions" quota (Service Quotas, Lambda), then set accountConcurrency to it`,
    );
  }
  const { concurrentQueries: queries, maxTasks } = input;
  const tasksPerQuery = maxTasks + 1;
  const planner = input.explicit?.planner ?? queries;
  const r: Reservations = {
    planner,
    segmentSearch: input.explicit?.segmentSearch ?? planner * tasksPerQuery,
    merge: input.explicit?.merge ?? planner,
    gc: input.explicit?.gc ?? 1,
  };
  if (queries > r.planner) {
    throw new TypeError(
      `The API's throttle burst (throttleBurstLimit, ${queries}) is above planner.reservedConcurrency (${r.planner}): the API would admit requests no planner can take, and API Gateway answers a throttled planner with a 500. Lower throttleBurstLimit to ${r.planner} or raise planner.reservedConcurrency`,
    );
  }
  if (r.segmentSearch < r.planner * tasksPerQuery) {
    throw new TypeError(
      `segmentSearch.reservedConcurrency (${r.segmentSearch}) is below planner.reservedConcurrency × (maxTasks + 1) = ${r.planner} × ${tasksPerQuery} = ${r.planner * tasksPerQuery}: concurrent queries would throttle each other's tasks. Leave it unset (derived), raise it, or lower throttleBurstLimit or maxTasks`,
    );
  }
  if (r.merge < r.planner) {
    throw new TypeError(
      `merge.reservedConcurrency (${r.merge}) is below planner.reservedConcurrency (${r.planner}): each concurrent query needs a merge. Leave it unset (derived) or raise it`,
    );
  }
  const total = r.planner + r.segmentSearch + r.merge + r.gc;
  if (total > budget) {
    // Queries that fit with derived reservations: each takes a planner, maxTasks + 1 tasks, a merge.
    const fit = Math.floor((budget - r.gc) / (tasksPerQuery + 2));
    throw new TypeError(
      `The stack would reserve ${total} concurrent executions (planner ${r.planner} + segment-search ${r.segmentSearch} + merge ${r.merge} + gc ${r.gc}), over the ${budget} that accountConcurrency ${account} allows (Lambda keeps ${UNRESERVED_MINIMUM} unreserved). ` +
        (fit >= 1
          ? `At maxTasks ${maxTasks} each concurrent query reserves ${tasksPerQuery + 2}: lower the burst to -c throttleBurstLimit=${fit} (the planner's reservation follows it unless set; keep throttleRateLimit at or below it), lower maxTasks, or raise accountConcurrency once the account's quota is higher`
          : `Lower maxTasks, or raise accountConcurrency once the account's quota is higher`),
    );
  }
  return r;
}
