package dev.leasehold;

import java.lang.System.Logger.Level;
import java.util.ArrayList;
import java.util.List;

/**
 * Futures to complete once the owner's lock is let go: their callbacks run user code, which may
 * call back into the owner (on another thread, or this one), so they never run while it is held.
 * The owner adds them holding its lock and flushes on the way out of every entry point.
 */
final class Completions {
  private static final System.Logger LOG = System.getLogger(Completions.class.getName());

  private final Object lock;
  // Guarded by lock.
  private final List<Runnable> tasks = new ArrayList<>();

  Completions(Object lock) {
    this.lock = lock;
  }

  /** An entry point: runs {@code step} holding the lock, then what it deferred, without. */
  void locked(Runnable step) {
    synchronized (lock) {
      step.run();
    }
    flush();
  }

  /** Holds the lock. Runs {@code task} at the next {@link #flush()}. */
  void later(Runnable task) {
    tasks.add(task);
  }

  /** Not holding the lock. Runs what was deferred, in order, until nothing is left. */
  void flush() {
    while (true) {
      List<Runnable> todo;
      synchronized (lock) {
        if (tasks.isEmpty()) {
          return;
        }
        todo = new ArrayList<>(tasks);
        tasks.clear();
      }
      for (Runnable task : todo) {
        try {
          task.run();
        } catch (RuntimeException e) {
          LOG.log(Level.WARNING, "a callback failed", e);
        }
      }
    }
  }
}
